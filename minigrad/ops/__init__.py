"""Every primitive, as an `Op` class and as the function that applies it.

`mg.ops.mul(a, b)` is `Mul.apply(a, b)`; each function sits beside its class. To add an op:
subclass `Op` with `forward` (array code on `ctx.xp`) and `backward` (tensor code), and call it
with `.apply` (docs/new-op.md).
"""
from ..shapes import AxisError, as_int, dim_keywords, normalize_axes, normalize_axis, unbroadcast
from .activation import (
                         Elu,
                         Gelu,
                         Hardtanh,
                         LeakyRelu,
                         Mish,
                         Silu,
                         Softmax,
                         Softplus,
                         elu,
                         gelu,
                         hardtanh,
                         leaky_relu,
                         mish,
                         relu6,
                         silu,
                         softmax,
                         softplus,
)
from .adaptive_pool import AdaptiveMaxPool2d, adaptive_avg_pool2d, adaptive_max_pool2d
from .base import Op
from .boolean import (
                         Compare,
                         all,
                         any,
                         bitwise_and,
                         bitwise_not,
                         bitwise_or,
                         bitwise_xor,
                         compare,
                         isclose,
                         isfinite,
                         isinf,
                         isnan,
)
from .compat import FloorDivide, bmm, floor_divide, masked_fill, mm
from .conv import Conv2d, Conv2dWeight, ConvTranspose2d
from .conv_functions import conv1d, conv2d, conv_transpose2d
from .device import ToDevice, to_device
from .distance import cdist, cosine_similarity, lp_normalize, pairwise_distance
from .einsum import Einsum, einsum
from .elementwise import (
                         Abs,
                         Add,
                         Cast,
                         Clamp,
                         Div,
                         Exp,
                         Keep,
                         Log,
                         Maximum,
                         Minimum,
                         Mul,
                         Neg,
                         Pow,
                         PowTensor,
                         Relu,
                         Sigmoid,
                         Sqrt,
                         Sub,
                         Tanh,
                         Where,
                         abs,
                         add,
                         cast,
                         clamp,
                         div,
                         exp,
                         log,
                         maximum,
                         minimum,
                         mul,
                         neg,
                         pow,
                         relu,
                         sigmoid,
                         sqrt,
                         sub,
                         tanh,
                         where,
)
from .exponential import (
                         Expm1,
                         Log1p,
                         Log2,
                         Log10,
                         Reciprocal,
                         Rsqrt,
                         expm1,
                         log1p,
                         log2,
                         log10,
                         reciprocal,
                         rsqrt,
                         square,
)
from .fused_batch_norm import FusedBatchNorm, composed_batch_norm, fused_batch_norm
from .fused_batch_norm_act import FusedBatchNormAct, composed_activation, fused_batch_norm_act
from .histogram import HistogramResult, bucketize, histc, histogram, searchsorted
from .indexing import GetItem, IndexAdd, IndexPut, getitem
from .join import Concatenate, Pad, Stack, concatenate, pad, stack
from .linalg import Linear, MatMul, linear, matmul
from .loss import CrossEntropy, LogSoftmax, cross_entropy, log_softmax, nll_loss
from .math import (
                         Ceil,
                         Cos,
                         Cumprod,
                         Cumsum,
                         Floor,
                         Remainder,
                         Round,
                         Sign,
                         Sin,
                         VectorNorm,
                         VectorNorm2,
                         ceil,
                         cos,
                         cumprod,
                         cumsum,
                         floor,
                         norm,
                         remainder,
                         round,
                         sign,
                         sin,
)
from .normalize import Normalize, normalize
from .ordering import (
                       PickAlong,
                       PutAlongAxis,
                       Sort,
                       SortResult,
                       TakeAlongAxis,
                       TopkResult,
                       argsort,
                       sort,
                       topk,
)
from .pool import AvgPool2d, MaxPool2d, avg_pool2d, max_pool2d
from .rearrange import (
                         Clone,
                         Diagonal,
                         DiagonalScatter,
                         Flip,
                         Roll,
                         chunk,
                         clone,
                         diagonal,
                         flip,
                         repeat,
                         roll,
                         split,
                         squeeze,
                         tile,
                         tril,
                         triu,
                         unsqueeze,
)
from .recurrent import (
                         GRUStep,
                         LSTMStep,
                         composed_gru_step,
                         composed_lstm_step,
                         gru_step,
                         lstm_step,
)
from .reduction import (
                         LogSumExp,
                         Max,
                         MaxResult,
                         Mean,
                         Min,
                         MinResult,
                         Prod,
                         Sum,
                         Var,
                         argmax,
                         argmin,
                         extremum_along,
                         logsumexp,
                         max,
                         mean,
                         min,
                         prod,
                         std,
                         sum,
                         var,
)
from .scatter import (
                         Scatter,
                         gather,
                         index_add,
                         index_select,
                         masked_select,
                         narrow,
                         nonzero,
                         scatter,
                         scatter_add,
                         select,
                         unbind,
)
from .shape import BroadcastTo, Reshape, Transpose, broadcast_to, permute, reshape, transpose
from .special import Erf, erf
from .window import Fold, Unfold
