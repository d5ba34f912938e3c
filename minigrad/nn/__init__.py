"""Neural-network building blocks: `Module`, `Parameter`, layers, `init` and `functional` (F)."""
from . import functional, init
from .activation import LogSoftmax, ReLU, Sigmoid, Tanh
from .container import Sequential
from .conv import Conv2d
from .dropout import Dropout
from .flatten import Flatten
from .linear import Identity, Linear
from .module import IncompatibleKeys, Module, Parameter, StateDictError
from .pooling import AvgPool2d, MaxPool2d
