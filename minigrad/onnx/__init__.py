"""ONNX export: `mg.onnx.export(model, example_input, "model.onnx")` (needs the extra `onnx`).

The model runs once on `example_input` inside `mg.autograd.record()`, with a floating-point
input made to require grad so that every op reached from it lands on the tape; the tape, read
in order, is the ONNX graph. Each op becomes one or a few ONNX nodes (the table in
`minigrad.onnx.ops`):

    graph input   "input"   the example input, its dtype (int64 token ids stay int64), its
                            batch axis (batch_axis, 0) named "batch" (any size)
    initializers            parameters and buffers (named as in state_dict), and constants
    nodes                   the ops in tape order; an op whose inputs do not depend on the
                            input (a reshape of gamma, the position embedding of arange(T))
                            is folded: its value becomes an initializer
    graph output  "output"  the model's result ("output0", "output1", ... for a tuple)

An integer input never requires grad, so minigrad records nothing it passes through until it
meets a parameter: the tape shows it as a constant (the index array of `weight[tokens]`, the
input of `tokens.float()`'s consumer). And a model reads sizes from its input (`x.shape[0]` in
a reshape, `zeros(x.shape[0], hidden)`, a slice's bounds), which the tape holds as plain ints.
The model therefore runs three times, on the example and on it moved one and two places along
with one and two more rows, and the runs are compared (constants.py, sizes.py): a constant
equal to the input in every run is the input; an int, or a constant of one value whose shape
or value is a * batch + b in every run, is computed in the file from Shape(input); anything
else that changes was computed from the input off the tape (`tokens % 5`, Embedding's padding
mask, `arange(x.shape[0])`) and is an error, as is a model that runs other ops another time.
The graph is converted from the first run and from the third, and the two must be the same
(a converter that read a traced size elsewhere would make them differ), so the file runs with
any batch size. `batch_axis` says which axis of the input is the batch (1 for a time-major
(T, N, F) sequence); `dynamic_batch=False` exports for the traced batch size only. The model
is traced in eval mode (batch norm with its running statistics, dropout off) and put back into
the mode it was in. Recurrent layers export unrolled over the traced sequence length.

Batch norm (the fused layers, `fused_batch_norm`) exports as ONNX BatchNormalization, or with
`batch_norm="primitives"` as its parts, normalize (Sub, Div by Sqrt(var + eps)), multiply and
add, so the exported graph shows the separation minigrad is built on. Composed BN layers
(`fused=False`) are already normalize, mul and add on the tape and export as those. Layer,
group and instance norm are `normalize` of each sample over its last axes, which is ONNX
LayerNormalization (opset 17), then the tape's multiply and add. GELU is ONNX Gelu from
`opset=20`; at the default opset 18 it is spelled out with Erf or Tanh.

An op with no ONNX counterpart in the table is a NotImplementedError naming it and the layer
(module path) that ran it; nothing is written then. The file is written atomically
(minigrad/atomic.py) after `onnx.checker` has passed, its weights streamed from their arrays
(write.py), in `<path>.data` as ONNX external data past protobuf's 2 GiB or with
`external_data=True`.
"""
from .export import export, to_model

__all__ = ["export", "to_model"]
