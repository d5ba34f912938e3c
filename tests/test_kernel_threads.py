"""The kernel threads (minigrad/backends/kernel_threads.py): how `map` shares blocks out, and the
convolution kernels giving the same bits at one thread and at two."""
import threading

import numpy as np
import pytest

import minigrad as mg
from minigrad.backends.kernel_threads import MIN_BLOCK_MACS, KernelThreads, kernel_threads
from minigrad.backends.numpy_conv import BlockedConv2d
from minigrad.ops.window import sliding_windows

BIG = MIN_BLOCK_MACS   # products that split
SMALL = MIN_BLOCK_MACS - 1


@pytest.fixture
def two():
    pool = KernelThreads()
    pool.resize(2)
    yield pool
    pool.resize(1)


def _threads_seen(pool, items, block_macs):
    """The thread that ran each item, in the items' order."""
    seen = {}

    def block(item):
        seen[item] = threading.get_ident()
        return item * item

    assert pool.map(block, items, block_macs) == [item * item for item in items]
    return [seen[item] for item in items]


def test_map_shares_contiguous_runs_over_the_threads_in_order(two):
    seen = _threads_seen(two, list(range(9)), BIG)
    caller = threading.get_ident()
    assert seen[:4] == [caller] * 4   # the caller runs the first run
    assert len(set(seen[4:])) == 1 and caller not in seen[4:]   # one worker, the rest


@pytest.mark.parametrize("items, block_macs", [(list(range(9)), SMALL), ([3], BIG), ([], BIG)])
def test_map_stays_in_the_caller_for_small_calls_and_single_blocks(two, items, block_macs):
    assert set(_threads_seen(two, items, block_macs)) <= {threading.get_ident()}


def test_map_at_one_thread_is_a_loop_in_the_caller():
    assert set(_threads_seen(KernelThreads(), list(range(9)), BIG)) == {threading.get_ident()}


def test_blocks_do_not_split_again(two):
    inner = []

    def block(item):
        inner.append(_threads_seen(two, [1, 2, 3, 4], BIG))
        return item

    two.map(block, [0, 1], BIG)
    assert all(len(set(seen)) == 1 for seen in inner)


def test_an_error_in_a_worker_reaches_the_caller_after_every_block_ran(two):
    ran = []

    def block(item):
        ran.append(item)
        if item == 5:
            raise ValueError("block 5 failed")
        return item

    with pytest.raises(ValueError, match="block 5 failed"):
        two.map(block, list(range(6)), BIG)
    assert sorted(ran) == list(range(6))


def _conv_case(channels, out_channels, pixels, kernel, batch, seed=0):
    """Windows of a padded float32 input and a weight and output gradient that fit them."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, channels, pixels, pixels), dtype=np.float32)
    weight = rng.standard_normal((out_channels, channels, kernel, kernel), dtype=np.float32)
    pad = kernel // 2
    windows = sliding_windows(np, x, (kernel, kernel), (1, 1), ((pad, pad), (pad, pad)))
    g = rng.standard_normal((out_channels,) + windows.shape[3:], dtype=np.float32)
    return weight, windows, g


def _spy(monkeypatch, pool):
    """A list that gains the thread of every run of blocks `pool` hands out from now on."""
    seen, run = [], pool._run
    monkeypatch.setattr(pool, "_run", lambda block, items: seen.append(threading.get_ident())
                        or run(block, items))
    return seen


# (C, O, pixels, kernel), and the kernels that split: Winograd (3x3, enough channels; its
# weight gradient from 64 channels), im2col with a long contraction (5x5 over 16 channels),
# im2col over one input channel (a short product an output row, 32 x 25 x 2048 multiply-adds:
# too small to split, as is its transpose's (1, 800) @ (800, 2048) a block)
CASES = [((32, 32, 32, 3), {"forward", "weight_grad", "transpose"}),
         ((64, 64, 16, 3), {"forward", "weight_grad", "transpose"}),
         ((16, 16, 24, 5), {"forward", "weight_grad", "transpose"}),
         ((1, 32, 64, 5), {"weight_grad"})]


@pytest.mark.parametrize("case, splitting", CASES)
def test_conv_kernels_give_the_same_bits_at_one_and_two_threads(monkeypatch, two, case,
                                                                 splitting):
    weight, windows, g = _conv_case(*case, batch=32)
    calls = {"forward": lambda k: k.forward(weight, windows),
             "weight_grad": lambda k: k.weight_grad(g, windows, np.float32),
             "transpose": lambda k: k.transpose(weight, g, windows.shape[3:5], [case[3] // 2] * 2)}
    serial, split = BlockedConv2d(np, threads=KernelThreads()), BlockedConv2d(np, threads=two)
    seen = _spy(monkeypatch, two)
    for name, call in calls.items():
        seen.clear()
        np.testing.assert_array_equal(call(serial), call(split), err_msg=name)
        assert len(set(seen)) == (2 if name in splitting else 0), name


def test_two_callers_share_the_pool_without_mixing_their_blocks(two):
    weight, windows, g = _conv_case(32, 32, 32, 3, batch=8)
    kernel = BlockedConv2d(np, threads=two)
    expected = BlockedConv2d(np, threads=KernelThreads()).forward(weight, windows)
    results, errors = [], []

    def caller():
        try:
            results.extend(kernel.forward(weight, windows) for _ in range(5))
        except Exception as error:   # noqa: BLE001 - reported below
            errors.append(error)

    callers = [threading.Thread(target=caller) for _ in range(2)]
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join()
    assert not errors and len(results) == 10
    for result in results:
        np.testing.assert_array_equal(result, expected)


def test_a_training_step_gives_the_same_bits_at_one_and_two_threads(monkeypatch):
    def step():
        mg.manual_seed(0)
        model = mg.nn.Sequential(mg.nn.Conv2d(3, 32, 3, padding=1), mg.nn.BatchNorm2d(32),
                                 mg.nn.ReLU(), mg.nn.Conv2d(32, 64, 3, padding=1),
                                 mg.nn.BatchNorm2d(64), mg.nn.ReLU(), mg.nn.Conv2d(64, 64, 3,
                                                                                  padding=1))
        x = mg.randn(16, 3, 32, 32, requires_grad=True)
        model(x).square().mean().backward()
        return [x.grad.numpy()] + [p.grad.numpy() for p in model.parameters()]

    one = step()
    seen = _spy(monkeypatch, kernel_threads)
    try:
        mg.set_num_threads(2)
        two = step()
    finally:
        mg.set_num_threads(1)
    assert len(set(seen)) == 2, "no conv split over the two threads"
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
