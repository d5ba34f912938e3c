"""Neural-network building blocks: `Module`, `Parameter`, layers, `init` and `functional` (F)."""
from . import caffe, functional, init, parallel, utils
from .activation import (
                         ELU,
                         GELU,
                         Hardtanh,
                         LeakyReLU,
                         LogSoftmax,
                         Mish,
                         ReLU,
                         ReLU6,
                         Sigmoid,
                         SiLU,
                         Softmax,
                         Softplus,
                         Tanh,
)
from .attention import MultiheadAttention
from .batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d
from .batchnorm_act import BatchNormAct1d, BatchNormAct2d
from .container import ModuleDict, ModuleList, Sequential
from .conv import Conv1d, Conv2d, ConvTranspose2d
from .dropout import Dropout, Dropout2d
from .embedding import Embedding
from .flatten import Flatten
from .fold import Fold, Unfold
from .lazy import (
                         LazyBatchNorm1d,
                         LazyBatchNorm2d,
                         LazyConv1d,
                         LazyConv2d,
                         LazyLinear,
                         UninitializedBuffer,
                         UninitializedParameter,
)
from .linear import Identity, Linear
from .loss import (
                         BCELoss,
                         BCEWithLogitsLoss,
                         CrossEntropyLoss,
                         HuberLoss,
                         KLDivLoss,
                         L1Loss,
                         MSELoss,
                         NLLLoss,
                         PoissonNLLLoss,
                         SmoothL1Loss,
)
from .module import IncompatibleKeys, Module, Parameter, RemovableHandle, StateDictError
from .normalization import (
                         GroupNorm,
                         InstanceNorm1d,
                         InstanceNorm2d,
                         InstanceNorm3d,
                         LayerNorm,
                         RegionBatchNorm2d,
                         RMSNorm,
)
from .padding import (
                         CircularPad1d,
                         CircularPad2d,
                         CircularPad3d,
                         ConstantPad1d,
                         ConstantPad2d,
                         ConstantPad3d,
                         ReflectionPad1d,
                         ReflectionPad2d,
                         ReflectionPad3d,
                         ReplicationPad1d,
                         ReplicationPad2d,
                         ReplicationPad3d,
                         ZeroPad1d,
                         ZeroPad2d,
                         ZeroPad3d,
)
from .pooling import AdaptiveAvgPool2d, AdaptiveMaxPool2d, AvgPool2d, MaxPool2d, MaxUnpool2d
from .rnn import GRU, LSTM, RNN, RNNBase
from .rnn_cells import GRUCell, LSTMCell, RNNCell
from .syncbatchnorm import SyncBatchNorm
from .transformer import (
                         Transformer,
                         TransformerDecoder,
                         TransformerDecoderLayer,
                         TransformerEncoder,
                         TransformerEncoderLayer,
)
from .upsampling import Upsample
