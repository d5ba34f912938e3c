"""mg.Generator and generator= (minigrad/random.py): independent, reproducible streams, as
torch.Generator gives them; multinomial and bernoulli against PyTorch's rules and
distributions. The numbers differ from PyTorch's (another bit generator), so the tests compare
behaviour: reproducibility, independence, distributions, dtypes, shapes and errors."""
import numpy as np
import pytest
import torch

import minigrad as mg


def test_makemore_ports_by_renaming():
    # Karpathy's makemore: g = torch.Generator().manual_seed(2147483647); randn(..., generator=g)
    def run(lib):
        g = lib.Generator().manual_seed(2147483647)
        C = lib.randn((27, 10), generator=g)
        p = lib.rand(27, generator=g)
        p = p / p.sum()
        ix = [lib.multinomial(p, num_samples=1, replacement=True, generator=g).item()
              for _ in range(20)]
        return C, ix

    C, ix = run(mg)
    C2, ix2 = run(mg)
    tC, tix = run(torch)
    assert C.shape == tuple(tC.shape) and C.dtype == np.float32
    np.testing.assert_array_equal(C.numpy(), C2.numpy())   # reproducible
    assert ix == ix2 and all(isinstance(i, int) and 0 <= i < 27 for i in ix + tix)


def test_streams_are_independent_of_each_other_and_of_the_default():
    g = mg.Generator().manual_seed(7)
    first = mg.randn(5, generator=g).numpy()
    g.manual_seed(7)
    mg.randn(100)                      # the default generator draws in between
    other = mg.Generator().manual_seed(7)
    mg.randn(3, generator=other)       # so does another generator with the same seed
    np.testing.assert_array_equal(mg.randn(5, generator=g).numpy(), first)


def test_generator_api_matches_torch():
    for lib in (mg, torch):
        g = lib.Generator()
        assert g.initial_seed() == 67280421310721
        assert g.manual_seed(3) is g and g.initial_seed() == 3
        s = g.seed()
        assert isinstance(s, int) and g.initial_seed() == s
        state = g.get_state()
        a = lib.rand(4, generator=g)
        g.set_state(state)
        b = lib.rand(4, generator=g)
        assert (a == b).all()
        assert str(g.device) == "cpu"
        g.manual_seed(-1)   # negative seeds wrap, as in PyTorch
    for lib, error in ((mg, ValueError), (torch, ValueError)):
        with pytest.raises(error):
            lib.Generator().manual_seed(2 ** 64)


def test_default_generator_functions():
    assert mg.manual_seed(11) is mg.default_generator
    assert mg.initial_seed() == 11
    a = mg.randn(3).numpy()
    mg.manual_seed(11)
    np.testing.assert_array_equal(mg.randn(3).numpy(), a)
    state = mg.get_rng_state()
    b = mg.rand(3).numpy()
    mg.set_rng_state(state)
    np.testing.assert_array_equal(mg.rand(3).numpy(), b)
    assert mg.default_generator.get_state() == mg.get_rng_state()
    s = mg.seed()
    assert mg.initial_seed() == s


@pytest.mark.parametrize("draw", [
    lambda g: mg.randn(3, 4, generator=g),
    lambda g: mg.rand(2, generator=g),
    lambda g: mg.randint(0, 10, (5,), generator=g),
    lambda g: mg.randperm(9, generator=g),
    lambda g: mg.normal(1.0, 2.0, (4,), generator=g),
    lambda g: mg.zeros(6).normal_(generator=g),
    lambda g: mg.zeros(6).uniform_(-1, 1, generator=g),
    lambda g: mg.zeros(6).bernoulli_(0.5, generator=g),
    lambda g: mg.bernoulli(mg.full((6,), 0.5), generator=g),
    lambda g: mg.multinomial(mg.ones(8), 4, generator=g),
    lambda g: mg.nn.init.kaiming_uniform_(mg.zeros(3, 4), generator=g),
    lambda g: mg.nn.init.xavier_normal_(mg.zeros(3, 4), generator=g),
    lambda g: mg.data.random_split(list(range(10)), [4, 6], generator=g)[0].indices,
    lambda g: list(mg.data.RandomSampler(range(10), generator=g)),
    lambda g: np.concatenate([b[0].numpy() for b in mg.data.DataLoader(
        mg.data.TensorDataset(np.arange(10)), 3, shuffle=True, generator=g)]),
])
def test_every_random_function_takes_a_generator(draw):
    def value(seed):
        mg.manual_seed(seed)       # the default generator must not matter
        out = draw(mg.Generator().manual_seed(5))
        return np.asarray(out.numpy() if isinstance(out, mg.Tensor) else out, dtype=float)

    np.testing.assert_array_equal(value(0), value(1))
    g = mg.Generator().manual_seed(5)
    draw(g)
    second = draw(g)   # the stream moved on
    second = second.numpy() if isinstance(second, mg.Tensor) else second
    assert not np.array_equal(np.asarray(second, dtype=float), value(0)) or \
        np.asarray(second).size <= 1


def test_a_numpy_generator_is_still_accepted_and_others_refused():
    a = mg.randn(3, generator=np.random.default_rng(0)).numpy()
    np.testing.assert_array_equal(a, np.random.default_rng(0).standard_normal(3)
                                  .astype(np.float32))
    with pytest.raises(TypeError, match="randn: generator must be a minigrad.Generator"):
        mg.randn(3, generator=3)
    with pytest.raises(TypeError):
        torch.randn(3, generator=3)


def test_dropout_uses_the_default_generator():
    mg.manual_seed(4)
    a = mg.nn.functional.dropout(mg.ones(50), 0.5).numpy()
    mg.manual_seed(4)
    np.testing.assert_array_equal(mg.nn.functional.dropout(mg.ones(50), 0.5).numpy(), a)


@pytest.mark.parametrize("replacement", [True, False])
def test_multinomial_distribution_matches_torch(replacement):
    weights = [[1.0, 0.0, 3.0, 6.0], [5.0, 5.0, 0.0, 0.0]]
    k = 2 if not replacement else 3
    ours = mg.multinomial(mg.tensor(weights), k, replacement, generator=mg.Generator()
                          .manual_seed(1))
    theirs = torch.multinomial(torch.tensor(weights), k, replacement)
    assert ours.shape == tuple(theirs.shape) and ours.dtype == np.int64
    # frequencies of the first draw over many rows, against torch's and the weights
    rows = mg.tensor([weights[0]] * 20000)
    first = mg.Generator().manual_seed(2)
    counts = np.bincount(rows.multinomial(2, replacement, generator=first).numpy()[:, 0],
                         minlength=4) / 20000
    torch_counts = np.bincount(torch.tensor([weights[0]] * 20000).multinomial(
        2, replacement)[:, 0].numpy(), minlength=4) / 20000
    np.testing.assert_allclose(counts, [0.1, 0.0, 0.3, 0.6], atol=0.015)
    np.testing.assert_allclose(counts, torch_counts, atol=0.02)
    if not replacement:   # no repeats in a row; the second draw skips the first's category
        picks = rows.multinomial(3, False, generator=first).numpy()
        assert all(len(set(r)) == 3 for r in picks)
        second = np.bincount(picks[:, 1], minlength=4) / 20000
        # P(second = 2) = P(first 0) * 3/9 + P(first 3) * 3/4 = 0.1/3 + 0.45
        np.testing.assert_allclose(second[2], 0.1 * 3 / 9 + 0.6 * 3 / 4, atol=0.015)


@pytest.mark.parametrize("args, message", [
    (([1, 2], 1), "floating-point"),
    (([-1.0, 2.0], 1), "element < 0"),
    (([float("nan"), 1.0], 1), "element < 0"),
    (([0.0, 0.0], 1), "sum of probabilities"),
    (([0.1, 0.9], 3), "n_sample"),
    (([0.1, 0.9], 0), "cannot sample"),
    (([[[1.0]]], 1), "1 or 2 dim"),
])
def test_multinomial_errors_match_torch(args, message):
    weights, n = args
    with pytest.raises(RuntimeError):
        torch.multinomial(torch.tensor(weights), n)
    with pytest.raises(RuntimeError, match=message):
        mg.multinomial(mg.tensor(weights), n)


def test_multinomial_without_replacement_takes_zero_weights_last_as_torch():
    ours = mg.multinomial(mg.tensor([0.1, 0.0, 0.9]), 3).numpy()
    theirs = torch.multinomial(torch.tensor([0.1, 0.0, 0.9]), 3).numpy()
    assert ours[-1] == theirs[-1] == 1 and sorted(ours) == [0, 1, 2]


def test_bernoulli_matches_torch():
    p = np.linspace(0, 1, 11, dtype=np.float32)
    ours = mg.bernoulli(mg.tensor(np.tile(p, (4000, 1))), generator=mg.Generator())
    theirs = torch.bernoulli(torch.tensor(np.tile(p, (4000, 1))))
    assert ours.dtype == np.float32 and ours.shape == tuple(theirs.shape)
    np.testing.assert_allclose(ours.numpy().mean(0), p, atol=0.03)
    np.testing.assert_allclose(ours.numpy().mean(0), theirs.numpy().mean(0), atol=0.04)
    x = mg.zeros(2000, dtype="float64").bernoulli_(0.25)
    assert x.dtype == np.float64 and abs(x.numpy().mean() - 0.25) < 0.04
    with pytest.raises(RuntimeError):
        torch.bernoulli(torch.tensor([1.5]))
    with pytest.raises(RuntimeError, match="0 <= p <= 1"):
        mg.bernoulli(mg.tensor([1.5]))


def test_in_place_draws_on_a_leaf_that_requires_grad_are_refused_as_in_torch():
    for lib in (mg, torch):
        w = lib.zeros(3, requires_grad=True)
        with pytest.raises(RuntimeError):
            w.normal_()
        with lib.no_grad():
            w.uniform_(0, 1)
        assert (w.detach() >= 0).all()


def test_generator_on_the_wrong_device_is_refused():
    g = mg.Generator()
    g.device = "cuda"   # a stand-in: the check reads the device
    with pytest.raises(RuntimeError, match="expected a 'cpu' generator"):
        mg.randn(2, generator=g)


def test_random_sampler_as_torch():
    from torch.utils.data import RandomSampler as TorchSampler
    for kwargs in ({}, {"replacement": True, "num_samples": 25}, {"num_samples": 23}):
        ours = list(mg.data.RandomSampler(range(10), **kwargs))
        theirs = list(TorchSampler(range(10), **kwargs))
        assert len(ours) == len(theirs) == len(mg.data.RandomSampler(range(10), **kwargs))
        assert all(0 <= i < 10 for i in ours)
        if not kwargs.get("replacement"):   # whole permutations, as torch's
            assert sorted(ours[:10]) == list(range(10))
    with pytest.raises(ValueError):
        TorchSampler(range(3), num_samples=0)
    with pytest.raises(ValueError, match="num_samples should be a positive integer"):
        mg.data.RandomSampler(range(3), num_samples=0)
