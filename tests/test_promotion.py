"""dtypes and type promotion against PyTorch: dtype objects and names, the default float dtype,
torch.result_type for random dtype pairs and operand kinds (tensor, 0-d tensor, Python number),
integer math that gives floats, and the ops that refuse to promote."""
import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import minigrad as mg
import minigrad.nn.functional as F
from minigrad.ops._promotion import result_type

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]
TORCH_DTYPE = {name: getattr(torch, name) for name in DTYPES}
OPS = {   # name -> (minigrad, torch)
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a / b, lambda a, b: a / b),
    "pow": (lambda a, b: a ** b, lambda a, b: a ** b),
    "maximum": (mg.ops.maximum, torch.maximum),
    "minimum": (mg.ops.minimum, torch.minimum),
    "where": (lambda a, b: mg.ops.where(mg.tensor([True, False, True]), a, b),
              lambda a, b: torch.where(torch.tensor([True, False, True]), a, b)),
}


@pytest.fixture(autouse=True)
def _restore_default_dtype():
    yield
    mg.set_default_dtype(mg.float32)
    torch.set_default_dtype(torch.float32)


def _operand(kind, dtype, values):
    """(minigrad operand, torch operand) of `kind`: a 1-D tensor, a 0-d tensor or a Python
    number, holding small positive values every dtype can represent."""
    if kind == "number":
        value = {"b": True, "u": 2, "i": 2, "f": 1.5}[np.dtype(dtype).kind]
        return value, value
    array = np.asarray(values if kind == "tensor" else values[0]).astype(dtype)
    return mg.tensor(array), torch.tensor(array)


def _both(mg_fn, torch_fn, *args):
    """Each framework's result, or the exception it raised."""
    results = []
    for fn, side in ((mg_fn, 0), (torch_fn, 1)):
        try:
            results.append(fn(*[arg[side] for arg in args]))
        except Exception as error:   # noqa: B902  (compared below)
            results.append(error)
    return results


@settings(max_examples=300, deadline=None)
@given(op=st.sampled_from(sorted(OPS)), dtypes=st.tuples(*[st.sampled_from(DTYPES)] * 2),
       kinds=st.sampled_from([("tensor", "tensor"), ("tensor", "0d"), ("0d", "tensor"),
                              ("tensor", "number"), ("number", "tensor"), ("0d", "0d"),
                              ("0d", "number"), ("number", "0d")]),
       seed=st.integers(0, 2**16))
def test_result_dtype_and_values_match_torch(op, dtypes, kinds, seed):
    assume(op not in ("maximum", "minimum") or "number" not in kinds)   # torch takes tensors
    # torch defines bool ** True (as bool) but no other bool power; minigrad refuses them all
    assume(op != "pow" or dtypes != ("bool", "bool"))
    values = np.random.default_rng(seed).integers(1, 4, size=3)
    a, b = (_operand(k, d, values) for k, d in zip(kinds, dtypes, strict=True))
    got, expected = _both(*OPS[op], a, b)
    if isinstance(expected, Exception):
        assert isinstance(got, (TypeError, ValueError, RuntimeError)), (op, dtypes, kinds, got)
        assert op in str(got)
        return
    assert not isinstance(got, Exception), (op, dtypes, kinds, got)
    assert got.dtype == np.dtype(str(expected.dtype).replace("torch.", "")), (op, dtypes, kinds)
    tolerance = 2e-3 if got.dtype == np.float16 else 1e-6
    np.testing.assert_allclose(got.numpy().astype(np.float64),
                               expected.numpy().astype(np.float64), rtol=tolerance)


@settings(max_examples=200, deadline=None)
@given(dtypes=st.tuples(*[st.sampled_from(DTYPES + ["complex64", "complex128"])] * 2),
       kinds=st.tuples(*[st.sampled_from(["tensor", "0d", "number"])] * 2))
def test_result_type_matches_torch_result_type(dtypes, kinds):
    if kinds == ("number", "number"):
        kinds = ("tensor", "number")
    # float16 with complex is complex32 in PyTorch, a dtype NumPy (and minigrad) lacks
    assume(not ({"float16"} < set(dtypes) and any(d.startswith("complex") for d in dtypes)))
    numbers = {"b": True, "u": 3, "i": 3, "f": 2.5, "c": 1j}
    pairs = [(numbers[np.dtype(d).kind],) * 2 if k == "number" else
             (mg.zeros((2,) if k == "tensor" else (), dtype=d),
              torch.zeros((2,) if k == "tensor" else (), dtype=getattr(torch, d)))
             for k, d in zip(kinds, dtypes, strict=True)]
    expected = torch.result_type(pairs[0][1], pairs[1][1])
    assert result_type(pairs[0][0], pairs[1][0]) == np.dtype(str(expected)[6:])


@pytest.mark.parametrize("name", ["float16", "float32", "float64", "int8", "int16", "int32",
                                  "int64", "uint8", "bool", "complex64", "complex128"])
def test_dtype_objects_are_numpy_dtypes_with_torch_names(name):
    dtype = getattr(mg, name)
    assert dtype == np.dtype(name) and isinstance(dtype, np.dtype)
    assert mg.zeros(2, dtype=dtype).dtype == dtype
    assert mg.tensor([1, 0]).to(dtype=dtype).dtype == dtype


@pytest.mark.parametrize("alias, name", [("float", "float32"), ("double", "float64"),
                                         ("half", "float16"), ("long", "int64"),
                                         ("int", "int32")])
def test_aliases_and_strings_mean_what_torch_says(alias, name):
    assert getattr(mg, alias) == np.dtype(name) == np.dtype(str(getattr(torch, alias))[6:])
    assert mg.zeros(2, dtype=alias).dtype == np.dtype(name)   # "float" is float32, not float64
    assert mg.tensor([1.0]).to(dtype=alias).dtype == np.dtype(name)


def test_an_unknown_dtype_is_a_clear_error():
    with pytest.raises(TypeError, match="'floaty' is not a dtype"):
        mg.zeros(2, dtype="floaty")


def test_the_default_dtype_is_float32_and_can_be_set():
    assert mg.get_default_dtype() == mg.float32
    mg.set_default_dtype(mg.float64)
    torch.set_default_dtype(torch.float64)
    assert mg.tensor([1.5]).dtype == mg.float64 == mg.zeros(2).dtype == mg.randn(2).dtype
    assert (mg.arange(3) / 3).dtype == mg.float64
    assert (mg.tensor([1]) * 0.5).dtype == mg.float64
    assert mg.tensor([1j]).dtype == np.complex128 == np.dtype(str(torch.tensor([1j]).dtype)[6:])
    # a Python float still does not widen a float32 tensor
    assert (mg.tensor([1.0], dtype=mg.float32) * 0.5).dtype == mg.float32
    with pytest.raises(TypeError, match="set_default_dtype: only floating-point"):
        mg.set_default_dtype(mg.int64)


def test_uint8_images_divided_by_a_float_are_float32():
    images = np.random.default_rng(0).integers(0, 256, (2, 1, 4, 4)).astype(np.uint8)
    x = mg.tensor(images) / 255.0
    assert x.dtype == mg.float32
    np.testing.assert_allclose(x.numpy(), (torch.tensor(images) / 255.0).numpy())
    assert (mg.arange(5) / 5).dtype == mg.float32


@pytest.mark.parametrize("fn", ["exp", "log", "sqrt", "tanh", "sigmoid"])
@pytest.mark.parametrize("dtype", ["bool", "uint8", "int32", "int64"])
def test_math_of_integer_tensors_gives_the_default_float(fn, dtype):
    values = np.array([1, 2, 3]).astype(dtype)
    got = getattr(mg.tensor(values), fn)()
    expected = getattr(torch, fn)(torch.tensor(values))
    assert got.dtype == mg.float32 and expected.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6)


def test_gradients_come_back_in_each_inputs_own_dtype():
    a = mg.tensor([1.0, 2.0], dtype=mg.float32, requires_grad=True)
    b = mg.tensor(3.0, dtype=mg.float64, requires_grad=True)   # 0-d: does not widen a
    out = a * b
    assert out.dtype == mg.float32
    out.sum().backward()
    assert a.grad.dtype == mg.float32 and b.grad.dtype == mg.float64
    np.testing.assert_allclose(b.grad.numpy(), 3.0)


@pytest.mark.parametrize("call", [
    lambda d: mg.ops.matmul(mg.zeros(2, 3), mg.zeros(3, 2, dtype=d)),
    lambda d: F.linear(mg.zeros(2, 3, dtype=d), mg.zeros(4, 3)),
    lambda d: F.linear(mg.zeros(2, 3), mg.zeros(4, 3), mg.zeros(4, dtype=d)),
    lambda d: F.conv2d(mg.zeros(1, 1, 4, 4, dtype=d), mg.zeros(2, 1, 3, 3)),
], ids=["matmul", "linear", "linear_bias", "conv2d"])
@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_matmul_linear_and_conv_refuse_mixed_float_dtypes(call, dtype):
    with pytest.raises(TypeError, match=f"different dtypes.*{dtype}"):
        call(dtype)


def test_torch_also_refuses_mixed_dtypes_in_matmul_linear_and_conv():
    x64, w32 = torch.zeros(2, 3, dtype=torch.float64), torch.zeros(4, 3)
    for call in (lambda: x64 @ w32.T, lambda: torch.nn.functional.linear(x64, w32),
                 lambda: torch.nn.functional.conv2d(torch.zeros(1, 1, 4, 4, dtype=torch.float64),
                                                    torch.zeros(2, 1, 3, 3))):
        with pytest.raises(RuntimeError):
            call()


@pytest.mark.parametrize("dtype, op, number", [("uint8", "add", 300), ("int8", "add", 1000),
                                               ("uint8", "sub", 1), ("uint8", "add", -1),
                                               ("float16", "mul", 1e6)], ids=str)
def test_a_python_number_takes_the_tensors_dtype_even_out_of_range_like_torch(dtype, op, number):
    values = np.array([1]).astype(dtype)
    got = OPS[op][0](mg.tensor(values), number)
    expected = OPS[op][1](torch.tensor(values), number)
    assert got.dtype == dtype == str(expected.dtype)[6:]
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_constants_of_numbers_under_no_grad_are_shared_read_only_and_exact():
    """An update lifts the same number each step: one read-only constant serves, a write into
    it is an error, and the sign of zero, inference mode, NaN and recorded ops keep their own."""
    from minigrad.ops._promotion import _CONSTANTS, _MOST_CONSTANTS, _constant
    x = mg.ones(3)
    with mg.no_grad():
        first, again = _constant(0.1, x.dtype, x), _constant(0.1, x.dtype, x)
        assert first is again and not first.array.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            first.array[...] = 2.0
        assert np.signbit(_constant(-0.0, x.dtype, x).array)
        assert not np.signbit(_constant(0.0, x.dtype, x).array)
        assert np.signbit((x * -0.0).numpy()).all()
        with mg.inference_mode():
            inside = _constant(0.1, x.dtype, x)
        assert inside is not first and inside._version_counter.inference
        for _ in range(2 * _MOST_CONSTANTS):
            _constant(float("nan"), x.dtype, x)
        assert len(_CONSTANTS) <= _MOST_CONSTANTS
    assert _constant(0.1, x.dtype, x) is _constant(0.1, x.dtype, x)   # nothing records
    w = mg.ones(3, requires_grad=True)
    assert _constant(0.1, w.dtype, w) is not _constant(0.1, w.dtype, w)   # a recorded op
