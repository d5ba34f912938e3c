"""Optimizers: `SGD` and `Adam` with PyTorch's update rules, on any backend, in place."""
from .adam import Adam
from .optimizer import Optimizer
from .sgd import SGD
