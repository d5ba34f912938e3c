"""Optimizers with PyTorch's update rules, on any backend, in place; learning-rate schedulers
in `lr_scheduler`."""
from . import lr_scheduler
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .sgd import SGD
