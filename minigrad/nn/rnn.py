"""The recurrent layers RNN, LSTM and GRU (PyTorch's arguments, outputs and parameter names).

The time loop is plain Python over minigrad's ops, so every gradient (higher orders too) comes
from the primitives. Per layer and direction:

    xi = input @ W_ih^T + b_ih             one matmul for all time steps
    for each step t: state = step(xi[t], state, W_hh, b_hh)     (nn/rnn_cells.py)

Input is run in packed form throughout: a padded (T, N, *) batch is the packed sequence whose
batch size is N at every step. With a PackedSequence, step t updates only the first
batch_sizes[t] rows of the state; the other sequences have ended (or, running backwards, not yet
begun), so their rows keep their state.
"""
import warnings

from .. import creation, ops
from . import functional as F
from .module import Module, Parameter
from .rnn_cells import GATES, STEPS, reset_uniform, rnn_mode
from .utils.rnn import PackedSequence


class RNNBase(Module):
    """What RNN, LSTM and GRU share: the parameters weight_ih_l{k}[_reverse],
    weight_hh_l{k}[_reverse], bias_ih_l{k}[_reverse], bias_hh_l{k}[_reverse] (and LSTM's
    weight_hr_l{k}[_reverse] with proj_size), registered in PyTorch's order, and the forward
    pass over layers and directions."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__()
        name = type(self).__name__
        if not 0 <= dropout <= 1 or isinstance(dropout, bool):
            raise ValueError(f"{name}: dropout should be a number in range [0, 1] representing "
                             f"the probability of an element being zeroed, got {dropout}")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"{name}: dropout option adds dropout after all but last recurrent "
                          f"layer, so non-zero dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}", stacklevel=2)
        if not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError(f"{name}: hidden_size must be an int greater than zero, got "
                             f"{hidden_size!r}")
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise ValueError(f"{name}: num_layers must be an int greater than zero, got "
                             f"{num_layers!r}")
        if proj_size < 0 or proj_size and mode != "LSTM" or proj_size >= hidden_size:
            raise ValueError(f"{name}: proj_size={proj_size} must be 0, or for LSTM only "
                             f"between 0 and hidden_size ({hidden_size}), not including it")
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, proj_size
        self._flat_weights_names = []
        directions = 2 if bidirectional else 1
        output_size = proj_size or hidden_size
        for layer in range(num_layers):
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                shapes = {"weight_ih": (GATES[mode] * hidden_size,
                                        input_size if layer == 0 else output_size * directions),
                          "weight_hh": (GATES[mode] * hidden_size, output_size)}
                if bias:
                    shapes.update(bias_ih=(GATES[mode] * hidden_size,),
                                  bias_hh=(GATES[mode] * hidden_size,))
                if proj_size:
                    shapes["weight_hr"] = (proj_size, hidden_size)
                for kind, shape in shapes.items():
                    setattr(self, kind + suffix,
                            Parameter(creation.zeros(*shape, device=device, dtype=dtype)))
                    self._flat_weights_names.append(kind + suffix)
        self.reset_parameters()

    def reset_parameters(self):
        reset_uniform(self, self.hidden_size)

    def flatten_parameters(self):
        """A no-op: PyTorch compacts the weights for cuDNN here; minigrad keeps them apart."""

    @property
    def _flat_weights(self):
        return [getattr(self, name) for name in self._flat_weights_names]

    def _weights(self, layer, direction):
        """(W_ih, b_ih) and the hidden weights (W_hh, b_hh[, W_hr]) of one layer and direction."""
        suffix = f"_l{layer}" + ("_reverse" if direction else "")

        def get(kind):
            return getattr(self, kind + suffix, None)

        hidden = (get("weight_hh"), get("bias_hh")) + ((get("weight_hr"),) if self.proj_size
                                                         else ())
        return get("weight_ih"), get("bias_ih"), hidden

    def _state_sizes(self):
        return [self.proj_size or self.hidden_size] + (
            [self.hidden_size] if self.mode == "LSTM" else [])

    def forward(self, input, hx=None):
        packed = isinstance(input, PackedSequence)
        if packed:
            data, batch_sizes = input.data, input.batch_sizes.numpy().tolist()
            batch, batched = batch_sizes[0], True
            self._check_features(data, 2)
        else:
            self._check_features(input, 3)
            batched = input.ndim == 3
            x = input if batched else input.unsqueeze(1)
            x = x.transpose(0, 1) if batched and self.batch_first else x
            steps, batch = x.shape[:2]
            data, batch_sizes = x.reshape(steps * batch, x.shape[2]), [batch] * steps
        states = self._initial_states(hx, batch, batched, data, input if packed else None)
        directions = 2 if self.bidirectional else 1
        finals = []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                w_ih, b_ih, hidden = self._weights(layer, direction)
                index = layer * directions + direction
                out, final = _run(STEPS[self.mode], F.linear(data, w_ih, b_ih), batch_sizes,
                                  tuple(s[index] for s in states), hidden, reverse=direction)
                outputs.append(out)
                finals.append(final)
            data = outputs[0] if directions == 1 else ops.concatenate(outputs, dim=1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                data = F.dropout(data, self.dropout, True)
        finals = tuple(ops.stack(list(s)) for s in zip(*finals))
        if packed:
            if input.unsorted_indices is not None:
                finals = tuple(ops.index_select(s, 1, input.unsorted_indices) for s in finals)
            output = input._replace(data=data)
        else:
            output = data.reshape(steps, batch, data.shape[1])
            if not batched:
                output, finals = output.squeeze(1), tuple(s.squeeze(1) for s in finals)
            elif self.batch_first:
                output = output.transpose(0, 1)
        return output, (finals if self.mode == "LSTM" else finals[0])

    def _check_features(self, input, batched_ndim):
        name = type(self).__name__
        if input.ndim not in (batched_ndim - 1, batched_ndim):
            raise ValueError(f"{name}: Expected input to be {batched_ndim - 1}D or "
                             f"{batched_ndim}D, got {input.ndim}D instead (shape {input.shape})")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"{name}: input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {input.shape[-1]}")

    def _initial_states(self, hx, batch, batched, data, packed):
        """The initial states, each (num_layers * directions, batch, size): zeros, or hx
        (h, or (h, c) for LSTM) checked and, for a packed batch, put in its sorted order."""
        name, sizes = type(self).__name__, self._state_sizes()
        layers = self.num_layers * (2 if self.bidirectional else 1)
        if hx is None:
            return tuple(creation.zeros(layers, batch, size, dtype=data.dtype,
                                        device=data.device) for size in sizes)
        states = tuple(hx) if self.mode == "LSTM" else (hx,)
        if len(states) != len(sizes):
            raise RuntimeError(f"{name}: expected hx to be a tuple (h_0, c_0), got "
                               f"{len(states)} tensors")
        if not batched:
            for k, s in enumerate(states):
                if s.ndim != 2:
                    raise RuntimeError(f"{name}: for unbatched 2-D input, hx[{k}] should also "
                                       f"be 2-D but got a {s.ndim}-D tensor")
            states = tuple(s.unsqueeze(1) for s in states)
        for k, (s, size) in enumerate(zip(states, sizes)):
            if s.shape != (layers, batch, size):
                which = f"hidden[{k}]" if self.mode == "LSTM" else "hidden"
                raise RuntimeError(f"{name}: Expected {which} size {(layers, batch, size)}, got "
                                   f"{s.shape}")
        if packed is not None and packed.sorted_indices is not None:
            states = tuple(ops.index_select(s, 1, packed.sorted_indices) for s in states)
        return states

    def extra_repr(self):
        text = f"{self.input_size}, {self.hidden_size}"
        defaults = dict(proj_size=0, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                        bidirectional=False)
        for key, default in defaults.items():
            if getattr(self, key) != default:
                text += f", {key}={getattr(self, key)}"
        return text


def _run(step, xi, batch_sizes, state, hidden, reverse):
    """One direction of one layer over packed input projections `xi` (sum(batch_sizes), G):
    its outputs, packed the same way, and the final state."""
    steps = ops.split(xi, batch_sizes)
    outputs = [None] * len(steps)
    for t in (reversed(range(len(steps))) if reverse else range(len(steps))):
        size = batch_sizes[t]
        if size == state[0].shape[0]:
            state = step(steps[t], state, *hidden)
        else:   # only the first `size` sequences take this step
            new = step(steps[t], tuple(s[:size] for s in state), *hidden)
            state = tuple(ops.concatenate([n, s[size:]]) for n, s in zip(new, state))
        outputs[t] = state[0][:size] if size != state[0].shape[0] else state[0]
    return ops.concatenate(outputs), state


class RNN(RNNBase):
    """An Elman RNN, h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu), stacked
    num_layers deep. forward(input, h_0=None) -> (output, h_n): output (T, N, D * H) (or
    (N, T, D * H) with batch_first, or a PackedSequence), h_n (num_layers * D, N, H)."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None):
        super().__init__(rnn_mode(nonlinearity), input_size, hidden_size, num_layers, bias,
                         batch_first, dropout, bidirectional, 0, device, dtype)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """A long short-term memory network stacked num_layers deep (gates in nn/rnn_cells.py);
    with proj_size, h is projected to proj_size by weight_hr. forward(input, (h_0, c_0)=None)
    -> (output, (h_n, c_n))."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, proj_size, device, dtype)


class GRU(RNNBase):
    """A gated recurrent unit network stacked num_layers deep (gates in nn/rnn_cells.py).
    forward(input, h_0=None) -> (output, h_n)."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, 0, device, dtype)
