"""One step of each recurrent cell, and the cell layers (RNNCell, LSTMCell, GRUCell).

A step takes `xi`, the input's projection x @ W_ih^T + b_ih (the recurrent layers compute it for
every time step at once, nn/rnn.py), the state as a tuple ((h,) or (h, c)) and the hidden
weights, and returns the new state. The gates follow PyTorch's layouts, row blocks of W:

    RNN   h' = tanh(xi + h W_hh^T + b_hh)                 (or relu)
    LSTM  i, f, g, o = xi + h W_hh^T + b_hh               (4 blocks: input, forget, cell, output)
          c' = sigmoid(f) c + sigmoid(i) tanh(g);  h' = sigmoid(o) tanh(c')   [h' W_hr^T]
    GRU   r, z, n from xi and h W_hh^T + b_hh             (3 blocks: reset, update, new)
          n = tanh(xi_n + sigmoid(r) (h W_hn^T + b_hn));  h' = n + sigmoid(z) (h - n)
"""
import math

from .. import creation, ops
from . import functional as F
from . import init
from .module import Module, Parameter


def rnn_tanh_step(xi, state, w_hh, b_hh):
    return (ops.tanh(xi + F.linear(state[0], w_hh, b_hh)),)


def rnn_relu_step(xi, state, w_hh, b_hh):
    return (ops.relu(xi + F.linear(state[0], w_hh, b_hh)),)


def lstm_step(xi, state, w_hh, b_hh, w_hr=None):
    h, c = ops.lstm_step(xi, *state, w_hh, b_hh)   # one fused op where it can (ops/recurrent.py)
    return (h if w_hr is None else F.linear(h, w_hr)), c


def gru_step(xi, state, w_hh, b_hh):
    return (ops.gru_step(xi, state[0], w_hh, b_hh),)   # one fused op where it can


STEPS = {"RNN_TANH": rnn_tanh_step, "RNN_RELU": rnn_relu_step, "LSTM": lstm_step,
         "GRU": gru_step}
GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def rnn_mode(nonlinearity):
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
    return "RNN_" + nonlinearity.upper()


def reset_uniform(module, hidden_size):
    """PyTorch's initialisation of every recurrent weight and bias: U(-1/sqrt(H), 1/sqrt(H))."""
    bound = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0.0
    for p in module.parameters():
        init.uniform_(p, -bound, bound)


class _CellBase(Module):
    """weight_ih (gates * H, input_size), weight_hh (gates * H, H), bias_ih, bias_hh."""

    _state_count = 1

    def __init__(self, mode, input_size, hidden_size, bias, device, dtype):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        self._mode = mode
        gates = GATES[mode] * hidden_size

        def parameter(*shape):
            return Parameter(creation.zeros(*shape, device=device, dtype=dtype))

        self.weight_ih = parameter(gates, input_size)
        self.weight_hh = parameter(gates, hidden_size)
        self.bias_ih = parameter(gates) if bias else None
        self.bias_hh = parameter(gates) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        reset_uniform(self, self.hidden_size)

    def forward(self, input, hx=None):
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"{name}: input has inconsistent input_size: got "
                               f"{input.shape[-1]} expected {self.input_size}")
        batched = input.ndim == 2
        x = input if batched else input.unsqueeze(0)
        if hx is None:
            zeros = creation.zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x.device)
            state = (zeros,) * self._state_count
        else:
            state = (hx,) if self._state_count == 1 else tuple(hx)
            state = state if batched else tuple(s.unsqueeze(0) for s in state)
            for k, s in enumerate(state):
                if s.shape != (x.shape[0], self.hidden_size):
                    raise RuntimeError(f"{name}: expected hidden state {k} of size "
                                       f"{(x.shape[0], self.hidden_size)}, got {s.shape}")
        state = STEPS[self._mode](F.linear(x, self.weight_ih, self.bias_ih), state,
                                  self.weight_hh, self.bias_hh)
        state = state if batched else tuple(s.squeeze(0) for s in state)
        return state[0] if self._state_count == 1 else state

    def extra_repr(self):
        text = f"{self.input_size}, {self.hidden_size}"
        return text if self.bias else text + ", bias=False"


class RNNCell(_CellBase):
    """h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (or relu); forward(input, hx=None) -> h'."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        super().__init__(rnn_mode(nonlinearity), input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity

    def extra_repr(self):
        text = super().extra_repr()
        return text if self.nonlinearity == "tanh" else text + ", nonlinearity='relu'"


class LSTMCell(_CellBase):
    """One LSTM step; forward(input, (h, c)=None) -> (h', c')."""

    _state_count = 2

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, bias, device, dtype)


class GRUCell(_CellBase):
    """One GRU step; forward(input, hx=None) -> h'."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, bias, device, dtype)
