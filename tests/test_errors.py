"""Bad calls get errors that name the op and what was expected, never a bare NumPy or Python
message nor another op's name (axis and shape errors: test_axes.py; dtype errors:
test_promotion.py)."""
import pytest
import torch

import minigrad as mg
import minigrad.nn.functional as F
from minigrad import nn

CASES = [
    (lambda: nn.Linear(3, 2)(mg.zeros(2, 4)), ValueError,
     r"linear: input of shape \(2, 4\) does not fit weight of shape \(2, 3\)"),
    (lambda: F.max_pool2d(mg.zeros(1, 1, 4, 4), 2.0), TypeError,
     "max_pool2d: kernel_size must be an int or a pair of ints, got 2.0"),
    (lambda: F.conv2d(mg.zeros(1, 1, 4, 4), mg.zeros(1, 1, 2, 2), stride=1.5), TypeError,
     "conv2d: stride must be an int or a pair of ints, got 1.5"),
    (lambda: mg.tensor([[1, 2], [3]]), ValueError, "tensor: the nested lists are not rectangular"),
    (lambda: mg.full((2,), "a"), TypeError, "full: the fill value must be a number"),
    (lambda: mg.zeros(2, 3) + "a", TypeError, "add: cannot use an input of type str"),
    (lambda: mg.zeros(2, 3) - mg.tensor([True, False, True]), TypeError,
     "sub: not supported with a bool operand"),
    (lambda: -mg.tensor([True]), TypeError, "neg: not supported with a bool operand"),
    (lambda: mg.tensor([2]) ** -1, ValueError, "pow: Integers to negative integer powers"),
    (lambda: mg.zeros(2, 3).min(axis=5), IndexError, "^min: axis 5"),
    (lambda: mg.zeros(2, 3).max(axis=5), IndexError, "^max: axis 5"),
    (lambda: nn.GroupNorm(2, 4)(mg.zeros(1, 6, 3, 3)), ValueError, "^GroupNorm: expected input"),
    (lambda: mg.ops.clamp(mg.zeros(2)), ValueError, "clamp: give min, max or both"),
]


@pytest.mark.parametrize("call, error, message", CASES, ids=[c[2][:40] for c in CASES])
def test_bad_calls_name_the_op_and_what_was_expected(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_torch_also_refuses_these_calls():
    for call in (lambda: torch.nn.Linear(3, 2)(torch.zeros(2, 4)),
                 lambda: torch.tensor([[1, 2], [3]]),
                 lambda: torch.zeros(2, 3) - torch.tensor([True, False, True]),
                 lambda: -torch.tensor([True]),
                 lambda: torch.tensor([2]) ** -1,
                 lambda: torch.zeros(2, 3).amin(dim=5)):
        with pytest.raises((RuntimeError, ValueError, TypeError, IndexError)):
            call()


def test_ported_except_runtime_error_code_catches_shape_and_dtype_errors():
    """The idiom of ported PyTorch code: try a shape, catch RuntimeError, fall back (the full
    table against torch is in test_pytorch_parity.py)."""
    from minigrad.ops.errors import DTypeError, ShapeError
    caught = []
    for attempt in (lambda: mg.zeros(2, 3) @ mg.zeros(2, 3),
                    lambda: mg.zeros(2, 3) @ mg.zeros(3, 2, dtype=mg.float64),
                    lambda: F.conv2d(mg.zeros(1, 2, 5, 5), mg.zeros(1, 3, 3, 3)),
                    lambda: mg.zeros(6).view(4, 2)):
        try:
            attempt()
        except RuntimeError as error:
            caught.append(type(error))
    assert caught == [ShapeError, DTypeError, ShapeError, ShapeError]
    assert issubclass(ShapeError, ValueError) and issubclass(DTypeError, TypeError)


@pytest.mark.parametrize("make, error, message", [
    (lambda: mg.nn.BatchNorm2d(-1), ValueError, r"BatchNorm2d: num_features must be an int >= 0"),
    (lambda: mg.nn.GroupNorm(0, 4), ValueError, r"GroupNorm: num_groups must be an int >= 1"),
    (lambda: mg.nn.RegionBatchNorm2d(4, regions=0), ValueError,
     r"RegionBatchNorm2d: regions must be an int >= 1"),
    (lambda: mg.optim.SGD([mg.nn.Parameter(mg.ones(2))], lr="0.1"), TypeError,
     r"SGD: lr must be a number, not str \('0.1'\)"),
    (lambda: mg.ones(2) < "a", TypeError, r"'<' not supported between instances of 'Tensor' "
                                          r"and 'str'"),
])
def test_bad_arguments_name_the_argument(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_comparing_a_tensor_with_a_string_or_none_is_false_as_in_torch():
    t = mg.ones(2)
    assert (t == "a") is False and (t != "a") is True and (t == None) is False  # noqa: E711
    assert (torch.ones(2) == "a") is False
