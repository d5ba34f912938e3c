"""The ops PyTorch code reaches for (issue 20) against PyTorch 2.13: forward values and shapes,
gradients for a random upstream gradient, gradcheck and second derivatives in float64, dtypes
and the errors for bad input."""
import numpy as np
import pytest
import torch

import minigrad as mg

from ops_oracle import check_vjp_derivatives, compare_with_torch, leaves, rng

R = rng(20)
X = R.standard_normal((3, 4, 5))
POS = R.uniform(0.5, 2.0, (3, 4))
IDX = R.integers(0, 3, (2, 4, 5))            # gather/scatter along dim 0 (repeats included)
IDX1 = R.integers(0, 4, (3, 2, 5))           # along dim 1, shorter than X there
SRC = R.standard_normal((3, 4, 5))
PICK = np.array([2, 0, 2, 1])                # index_select / index_add along dim 1
MASK = R.standard_normal((4, 5)) > 0


def i64(a):
    return mg.tensor(a, dtype="int64"), torch.tensor(a, dtype=torch.int64)


IX, TI = i64(IDX)
I1, TI1 = i64(IDX1)
P, TP = i64(PICK)
UNIQUE, T_UNIQUE = i64(np.argsort(R.standard_normal((3, 4, 5)), axis=0)[:2])   # no repeats

DIFFERENTIABLE = {   # name -> (minigrad f(*xs), torch f(*xs), inputs)
    "log2": (mg.log2, torch.log2, [POS]),
    "log10": (mg.log10, torch.log10, [POS]),
    "log1p": (mg.log1p, torch.log1p, [POS]),
    "expm1": (mg.expm1, torch.expm1, [X]),
    "rsqrt": (mg.rsqrt, torch.rsqrt, [POS]),
    "reciprocal": (mg.reciprocal, torch.reciprocal, [POS]),
    "square": (mg.square, torch.square, [X]),
    "pow_method": (lambda x: x.pow(3), lambda x: x.pow(3), [X]),
    "abs_builtin": (abs, abs, [X]),
    "gather0": (lambda x: x.gather(0, IX), lambda x: x.gather(0, TI), [X]),
    "gather1_short": (lambda x: mg.gather(x, 1, I1), lambda x: torch.gather(x, 1, TI1), [X]),
    "scatter": (lambda x, s: x.scatter(0, UNIQUE, s), lambda x, s: x.scatter(0, T_UNIQUE, s),
                [X, SRC[:2]]),
    "scatter_value": (lambda x: x.scatter(0, UNIQUE, 2.5),
                      lambda x: x.scatter(0, T_UNIQUE, 2.5), [X]),
    "scatter_add": (lambda x, s: x.scatter_add(0, IX, s), lambda x, s: x.scatter_add(0, TI, s),
                    [X, SRC[:2]]),
    "scatter_add_short": (lambda x, s: mg.scatter_add(x, 1, I1, s),
                          lambda x, s: torch.scatter_add(x, 1, TI1, s), [X, SRC[:, :2]]),
    "index_select": (lambda x: x.index_select(1, P), lambda x: x.index_select(1, TP), [X]),
    "index_add": (lambda x, s: x.index_add(1, P, s, alpha=2.0),
                  lambda x, s: x.index_add(1, TP, s, alpha=2.0), [X, SRC]),
    "masked_select": (lambda x: x.masked_select(mg.tensor(MASK)),
                      lambda x: x.masked_select(torch.tensor(MASK)), [X]),
    "narrow": (lambda x: x.narrow(2, -3, 2), lambda x: x.narrow(2, -3, 2), [X]),
    "select": (lambda x: mg.select(x, 1, -1), lambda x: torch.select(x, 1, -1), [X]),
    "unbind": (lambda x: mg.stack(x.unbind(1)[::-1], 0),
               lambda x: torch.stack(x.unbind(1)[::-1], 0), [X]),
    "mT": (lambda x: x.mT, lambda x: x.mT, [X]),
    "einsum_matmul": (lambda a, b: mg.einsum("ij,jk->ik", a, b),
                      lambda a, b: torch.einsum("ij,jk->ik", a, b), [X[0], X[1].T]),
    "einsum_batch_ellipsis": (lambda a, b: mg.einsum("...ij, ...jk", a, b[:, :, :4]),
                              lambda a, b: torch.einsum("...ij, ...jk", a, b[:, :, :4]),
                              [X, SRC.transpose(0, 2, 1)]),
    "einsum_broadcast_batch": (lambda a, b: mg.einsum("...ij,...jk->...ik", a, b),
                               lambda a, b: torch.einsum("...ij,...jk->...ik", a, b),
                               [X[:1], SRC.transpose(0, 2, 1)[:, :, :2]]),
    "einsum_sum_only_in_one": (lambda a, b: mg.einsum("ijk,j->i", a, b),
                               lambda a, b: torch.einsum("ijk,j->i", a, b), [X, X[0, :, 0]]),
    "einsum_three": (lambda a, b, c: mg.einsum("ij,jk,kl->il", [a, b, c]),
                     lambda a, b, c: torch.einsum("ij,jk,kl->il", [a, b, c]),
                     [X[0], X[1].T, X[2]]),
    "einsum_trace": (lambda a: mg.einsum("ii", a), lambda a: torch.einsum("ii", a),
                     [X[0, :, :4]]),
    "einsum_diagonals": (lambda a, b: mg.einsum("iij,jkj->ik", a, b),
                         lambda a, b: torch.einsum("iij,jkj->ik", a, b),
                         [R.standard_normal((3, 3, 2)), R.standard_normal((2, 4, 2))]),
    "einsum_outer_transpose": (lambda a, b: mg.einsum("i,j->ji", a, b),
                               lambda a, b: torch.einsum("i,j->ji", a, b), [X[0, 0], X[1, 1]]),
    "cdist": (mg.cdist, torch.cdist, [X[0], X[1]]),
    "cdist_batched_p1": (lambda a, b: mg.cdist(a, b, 1.0), lambda a, b: torch.cdist(a, b, 1.0),
                         [X, SRC]),
    "cdist_p3": (lambda a, b: mg.cdist(a, b, 3.0), lambda a, b: torch.cdist(a, b, 3.0),
                 [X[0], X[1]]),
    "cdist_p3_to_itself": (lambda a: mg.cdist(a, a, 3.0), lambda a: torch.cdist(a, a, 3.0),
                           [X[0]]),
    "cdist_inf": (lambda a, b: mg.cdist(a, b, float("inf")),
                  lambda a, b: torch.cdist(a, b, float("inf")), [X[0], X[1]]),
    "var_mean": (lambda x: mg.stack(mg.var_mean(x, 1)), lambda x: torch.stack(
        torch.var_mean(x, 1)), [X]),
    "std_mean": (lambda x: mg.stack(mg.std_mean(x, (0, 2), correction=0, keepdim=True)),
                 lambda x: torch.stack(torch.std_mean(x, (0, 2), correction=0, keepdim=True)),
                 [X]),
}


@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_matches_torch_forward_and_backward(name):
    ours, theirs, arrays = DIFFERENTIABLE[name]
    compare_with_torch(ours, theirs, arrays)


@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_gradcheck_and_second_derivatives(name):
    ours, _, arrays = DIFFERENTIABLE[name]
    assert mg.gradcheck(ours, leaves(*arrays))
    check_vjp_derivatives(ours, arrays)


@pytest.mark.parametrize("name", ["log2", "log10", "log1p", "expm1", "rsqrt", "reciprocal",
                                  "square"])
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_pointwise_dtypes_follow_torch(name, dtype):
    data = np.array([[1, 2], [3, 1]])
    x = mg.tensor(data, dtype=dtype)
    expected_error = None
    try:
        ref = getattr(torch, name)(torch.tensor(data).to(getattr(torch, dtype)))
    except RuntimeError as error:
        expected_error = error
    if expected_error is not None:
        with pytest.raises((TypeError, RuntimeError)):
            getattr(mg, name)(x)
        return
    out = getattr(mg, name)(x)
    assert out.dtype.name == str(ref.dtype).removeprefix("torch.")
    np.testing.assert_allclose(out.numpy().astype(float), ref.numpy().astype(float), rtol=1e-6)


def test_comparison_methods_and_functions():
    a, b = R.standard_normal((3, 4)), R.standard_normal(4)
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        ours = getattr(mg.tensor(a), name)(mg.tensor(b))
        theirs = getattr(torch.tensor(a), name)(torch.tensor(b))
        assert ours.dtype == mg.bool
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
        np.testing.assert_array_equal(getattr(mg, name)(mg.tensor(a), 0.0).numpy(),
                                      getattr(torch, name)(torch.tensor(a), 0.0).numpy())
    assert mg.tensor(a).nelement() == torch.tensor(a).nelement()


@pytest.mark.parametrize("as_tuple", [False, True])
@pytest.mark.parametrize("shape", [(3, 4), (5,), ()])
def test_nonzero_and_where_with_one_argument(shape, as_tuple):
    data = (R.standard_normal(shape) > 0).astype(np.float32) * 3
    ours = mg.tensor(data).nonzero(as_tuple=as_tuple)
    theirs = torch.tensor(data).nonzero(as_tuple=as_tuple)
    if as_tuple:
        assert len(ours) == len(theirs)
        for o, t in zip(ours, theirs):
            assert o.dtype == mg.int64
            np.testing.assert_array_equal(o.numpy(), t.numpy())
        for o, t in zip(mg.where(mg.tensor(data) > 0), torch.where(torch.tensor(data) > 0)):
            np.testing.assert_array_equal(o.numpy(), t.numpy())
    else:
        assert ours.shape == tuple(theirs.shape) and ours.dtype == mg.int64
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_isclose():
    a = np.array([1.0, 1.0 + 1e-6, np.nan, 2.0, np.inf])
    b = np.array([1.0, 1.0, np.nan, 2.1, np.inf])
    for equal_nan in (False, True):
        ours = mg.tensor(a).isclose(mg.tensor(b), equal_nan=equal_nan)
        theirs = torch.tensor(a).isclose(torch.tensor(b), equal_nan=equal_nan)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    np.testing.assert_array_equal(mg.isclose(mg.tensor(a), mg.tensor(b), rtol=0.1).numpy(),
                                  torch.isclose(torch.tensor(a), torch.tensor(b), 0.1).numpy())
    with pytest.raises(RuntimeError):
        torch.isclose(torch.tensor([1.0]), torch.tensor([1]))
    with pytest.raises(RuntimeError):
        mg.isclose(mg.tensor([1.0]), mg.tensor([1]))


def test_scatter_from_a_larger_src_reads_its_leading_block():
    """(PyTorch 2.13's own backward fails here, so the gradient is checked by gradcheck.)"""
    x, src = leaves(X, SRC)
    out = x.scatter(0, UNIQUE, src)
    ref = torch.tensor(X).scatter(0, T_UNIQUE, torch.tensor(SRC))
    np.testing.assert_array_equal(out.detach().numpy(), ref.numpy())
    assert mg.gradcheck(lambda a, b: a.scatter_add(1, I1, b), [x, src])
    assert mg.gradcheck(lambda a, b: a.scatter(0, UNIQUE, b), [x, src])


def test_gather_scatter_on_integers_keep_the_dtype():
    x = np.arange(12).reshape(3, 4)
    index = np.array([[0, 2], [1, 1], [3, 0]])
    ours = mg.tensor(x).gather(1, mg.tensor(index))
    theirs = torch.tensor(x).gather(1, torch.tensor(index))
    assert ours.dtype == mg.int64
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    ours = mg.tensor(x).scatter_add(1, mg.tensor(index), mg.ones(3, 2, dtype="int64"))
    theirs = torch.tensor(x).scatter_add(1, torch.tensor(index), torch.ones(3, 2).long())
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


BAD = {   # name -> (minigrad call, torch call); both must raise the same error type
    "gather_out_of_range": (lambda: mg.tensor([[1.0, 2.0]]).gather(1, mg.tensor([[2]])),
                            lambda: torch.tensor([[1.0, 2.0]]).gather(1, torch.tensor([[2]]))),
    "gather_negative": (lambda: mg.tensor([[1.0, 2.0]]).gather(1, mg.tensor([[-1]])),
                        lambda: torch.tensor([[1.0, 2.0]]).gather(1, torch.tensor([[-1]]))),
    "gather_float_index": (
        lambda: mg.tensor([1.0]).gather(0, mg.tensor([0.0])),
        lambda: torch.tensor([1.0]).gather(0, torch.tensor([0.0]))),
    "gather_ndim": (lambda: mg.tensor([[1.0, 2.0]]).gather(1, mg.tensor([0])),
                    lambda: torch.tensor([[1.0, 2.0]]).gather(1, torch.tensor([0]))),
    "gather_bad_dim": (lambda: mg.tensor([[1.0]]).gather(2, mg.tensor([[0]])),
                       lambda: torch.tensor([[1.0]]).gather(2, torch.tensor([[0]]))),
    "scatter_dtype": (lambda: mg.tensor([[1.0]]).scatter(1, mg.tensor([[0]]),
                                                         mg.tensor([[1.0]], dtype="float64")),
                      lambda: torch.tensor([[1.0]]).scatter(
                          1, torch.tensor([[0]]), torch.tensor([[1.0]], dtype=torch.float64))),
    "scatter_src_small": (lambda: mg.zeros(3, 3).scatter(0, mg.tensor([[0, 1, 2]]),
                                                         mg.ones(1, 2)),
                          lambda: torch.zeros(3, 3).scatter(0, torch.tensor([[0, 1, 2]]),
                                                            torch.ones(1, 2))),
    "index_select_matrix": (lambda: mg.tensor([1.0, 2.0]).index_select(0, mg.tensor([[0]])),
                            lambda: torch.tensor([1.0, 2.0]).index_select(
                                0, torch.tensor([[0]]))),
    "index_select_range": (lambda: mg.tensor([1.0, 2.0]).index_select(0, mg.tensor([5])),
                           lambda: torch.tensor([1.0, 2.0]).index_select(0, torch.tensor([5]))),
    "masked_select_not_bool": (lambda: mg.tensor([1.0, 2.0]).masked_select(mg.tensor([1, 0])),
                               lambda: torch.tensor([1.0, 2.0]).masked_select(
                                   torch.tensor([1, 0]))),
    "narrow_too_long": (lambda: mg.tensor([1.0, 2.0]).narrow(0, 1, 5),
                        lambda: torch.tensor([1.0, 2.0]).narrow(0, 1, 5)),
    "narrow_bad_dim": (lambda: mg.tensor([1.0, 2.0]).narrow(3, 0, 1),
                       lambda: torch.tensor([1.0, 2.0]).narrow(3, 0, 1)),
    "narrow_bad_start": (lambda: mg.tensor([1.0, 2.0]).narrow(0, 5, 0),
                         lambda: torch.tensor([1.0, 2.0]).narrow(0, 5, 0)),
    "select_out_of_range": (lambda: mg.ones(2, 3).select(0, 2),
                            lambda: torch.ones(2, 3).select(0, 2)),
    "unbind_0d": (lambda: mg.tensor(1.0).unbind(), lambda: torch.tensor(1.0).unbind()),
    "mT_vector": (lambda: mg.tensor([1.0]).mT, lambda: torch.tensor([1.0]).mT),
    "histc_int": (lambda: mg.histc(mg.tensor([1, 2]), 3), lambda: torch.histc(
        torch.tensor([1, 2]), 3)),
    "histc_min_above_max": (lambda: mg.histc(mg.tensor([1.0]), 3, min=3, max=1),
                            lambda: torch.histc(torch.tensor([1.0]), 3, min=3, max=1)),
    "histogram_no_bins": (lambda: mg.histogram(mg.tensor([1.0]), 0),
                          lambda: torch.histogram(torch.tensor([1.0]), 0)),
    "searchsorted_rows": (lambda: mg.searchsorted(mg.tensor([[1.0, 2.0]]), mg.tensor([1.0, 3])),
                          lambda: torch.searchsorted(torch.tensor([[1.0, 2.0]]),
                                                     torch.tensor([1.0, 3]))),
    "searchsorted_sides": (lambda: mg.searchsorted(mg.tensor([1.0]), mg.tensor([1.0]),
                                                   side="left", right=True),
                           lambda: torch.searchsorted(torch.tensor([1.0]), torch.tensor([1.0]),
                                                      side="left", right=True)),
    "bucketize_2d": (lambda: mg.bucketize(mg.tensor([1.0]), mg.tensor([[1.0, 2.0]])),
                     lambda: torch.bucketize(torch.tensor([1.0]), torch.tensor([[1.0, 2.0]]))),
    "cdist_columns": (lambda: mg.cdist(mg.zeros(2, 3), mg.zeros(2, 4)),
                      lambda: torch.cdist(torch.zeros(2, 3), torch.zeros(2, 4))),
    "cdist_vector": (lambda: mg.cdist(mg.zeros(3), mg.zeros(2, 3)),
                     lambda: torch.cdist(torch.zeros(3), torch.zeros(2, 3))),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_raises_what_torch_raises(name):
    ours, theirs = BAD[name]
    with pytest.raises(Exception) as expected:
        theirs()
    with pytest.raises(expected.type) as got:
        ours()
    assert type(got.value).__module__.startswith(("builtins", "minigrad")), got.value


def test_einsum_equation_errors():
    t = mg.tensor(X[0], requires_grad=True)
    with pytest.raises(ValueError, match="operands"):
        mg.einsum("ij,jk", t)
    with pytest.raises(ValueError, match="do not fit"):
        mg.einsum("ijk", t)
    with pytest.raises(ValueError, match="output"):
        mg.einsum("ij->ik", t)


HIST = R.standard_normal(200).astype(np.float32)


@pytest.mark.parametrize("bins, low, high", [(10, 0, 0), (7, -1.0, 1.5), (4, 3.0, 3.0)])
def test_histc(bins, low, high):
    ours = mg.tensor(HIST).histc(bins, low, high)
    theirs = torch.tensor(HIST).histc(bins, low, high)
    assert ours.dtype == mg.float32
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    constant = mg.tensor([1.0, 1.0])
    np.testing.assert_array_equal(mg.histc(constant, 4).numpy(),
                                  torch.histc(torch.tensor([1.0, 1.0]), 4).numpy())


@pytest.mark.parametrize("options", [dict(bins=10), dict(bins=5, range=(-1.0, 2.0)),
                                     dict(bins=6, density=True), dict(bins=4, weight=True),
                                     dict(bins="edges")])
def test_histogram(options):
    options = dict(options)
    theirs_options = dict(options)
    if options.get("weight"):
        weight = R.uniform(0, 1, HIST.shape).astype(np.float32)
        options["weight"], theirs_options["weight"] = mg.tensor(weight), torch.tensor(weight)
    if options["bins"] == "edges":
        edges = np.array([-2.0, -0.5, 0.0, 0.3, 2.5], np.float32)
        options["bins"], theirs_options["bins"] = mg.tensor(edges), torch.tensor(edges)
    hist, edges = mg.histogram(mg.tensor(HIST), **options)
    ref = torch.histogram(torch.tensor(HIST), **theirs_options)
    assert hist.dtype == edges.dtype == mg.float32
    np.testing.assert_allclose(edges.numpy(), ref.bin_edges.numpy(), rtol=1e-6)
    np.testing.assert_allclose(hist.numpy(), ref.hist.numpy(), rtol=1e-5)
    assert mg.histogram(mg.tensor(HIST)).hist.shape == (100,)


@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_and_bucketize(right):
    boundaries = np.array([-1.0, 0.0, 0.0, 0.5, 2.0])
    values = np.array([[-3.0, 0.0, 0.2], [0.5, 2.0, 9.0]])
    ours = mg.searchsorted(mg.tensor(boundaries), mg.tensor(values), right=right)
    theirs = torch.searchsorted(torch.tensor(boundaries), torch.tensor(values), right=right)
    assert ours.dtype == mg.int64
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    rows = np.sort(R.standard_normal((2, 6)), axis=1)
    side = "right" if right else "left"
    ours = mg.searchsorted(mg.tensor(rows), mg.tensor(values), side=side, out_int32=True)
    theirs = torch.searchsorted(torch.tensor(rows), torch.tensor(values), side=side,
                                out_int32=True)
    assert ours.dtype == mg.int32
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    scalar = mg.searchsorted(mg.tensor(boundaries), 0.1)
    assert scalar.shape == () and scalar.item() == torch.searchsorted(
        torch.tensor(boundaries), 0.1).item()
    unsorted = np.array([3.0, -1.0, 2.0])
    order = np.argsort(unsorted)
    ours = mg.searchsorted(mg.tensor(unsorted), mg.tensor(values), sorter=mg.tensor(order))
    theirs = torch.searchsorted(torch.tensor(unsorted), torch.tensor(values),
                                sorter=torch.tensor(order))
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    ours = mg.bucketize(mg.tensor(values), mg.tensor(boundaries), right=right)
    theirs = torch.bucketize(torch.tensor(values), torch.tensor(boundaries), right=right)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_result_type_and_promote_types():
    cases = [(mg.tensor([1], dtype="int32"), 2.5), (mg.tensor([1], dtype="uint8"),
                                                    mg.tensor([1], dtype="int8")),
             (mg.tensor(1.0, dtype="float64"), mg.tensor([1], dtype="int16"))]
    for a, b in cases:
        ta = torch.tensor(a.numpy())
        tb = torch.tensor(b.numpy()) if isinstance(b, mg.Tensor) else b
        assert mg.result_type(a, b).name == str(torch.result_type(ta, tb)).removeprefix("torch.")
    for a, b in [("int32", "float16"), ("uint8", "int8"), ("bool", "int64"),
                 ("float32", "float64")]:
        theirs = torch.promote_types(getattr(torch, a), getattr(torch, b))
        assert mg.promote_types(getattr(mg, "bool" if a == "bool" else a),
                                b).name == str(theirs).removeprefix("torch.")


def test_histc_and_friends_are_constants():
    x = mg.tensor(HIST, requires_grad=True)
    for out in (x.histc(5), mg.histogram(x, 5).hist, mg.bucketize(x, mg.tensor([0.0])),
                x.nonzero()):
        assert not out.requires_grad


def test_where_with_numbers_takes_torchs_dtypes():
    condition = np.array([True, False, True])
    for a, b in [(1.0, 0.0), (1, 0), (mg.tensor([1.0, 2.0, 3.0], dtype="float16"), 0.5)]:
        ta = torch.tensor(a.numpy()) if isinstance(a, mg.Tensor) else a
        ours, theirs = mg.where(mg.tensor(condition), a, b), torch.where(
            torch.tensor(condition), ta, b)
        assert ours.dtype.name == str(theirs.dtype).removeprefix("torch.")
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_the_new_ops_never_write_into_their_inputs(monkeypatch):
    for op in (mg.ops.Scatter, mg.ops.Einsum, mg.ops.Log2, mg.ops.Log10, mg.ops.Log1p,
               mg.ops.Expm1, mg.ops.Rsqrt, mg.ops.Reciprocal):
        monkeypatch.setattr(op, "read_only_inputs", True)
    for ours, _, arrays in DIFFERENTIABLE.values():
        xs = leaves(*arrays)
        (d,) = mg.grad((ours(*xs) ** 2).sum(), xs[:1], create_graph=True)
        (d * d).sum().backward()   # the backward of every op the first backward used
