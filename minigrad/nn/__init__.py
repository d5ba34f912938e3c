"""Neural-network building blocks: `Module`, `Parameter`, layers, `init` and `functional` (F)."""
from . import init
from .module import IncompatibleKeys, Module, Parameter, StateDictError
