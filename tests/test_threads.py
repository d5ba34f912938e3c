"""The CPU kernels' thread pool (minigrad/backends/threads.py), sized by mg.set_num_threads: the
same bits at one and at two threads for every kernel path that splits its work, pieces' results
in their order, a piece's own pieces run in its thread, one thread by default."""
import threading

import numpy as np
import pytest

import minigrad as mg
from minigrad.backends import threads

pytest.importorskip("threadpoolctl")   # set_num_threads needs it
CPU = mg.get_backend("cpu")


@pytest.fixture
def restore_threads():
    before = mg.get_num_threads(), threads.get_threads()
    yield
    mg.set_num_threads(before[0])
    threads.set_threads(before[1])


def test_one_thread_by_default_and_set_num_threads_sizes_the_pool(restore_threads):
    assert threads.get_threads() == 1
    mg.set_num_threads(2)
    assert threads.get_threads() == 2
    mg.set_num_threads(1)
    assert threads.get_threads() == 1


def test_pieces_run_on_the_pool_and_come_back_in_order(restore_threads):
    threads.set_threads(2)
    names = []
    barrier = threading.Barrier(2, timeout=30)   # both pieces must be running at once

    def piece(i):
        barrier.wait()
        names.append(threading.current_thread().name)
        return i

    assert threads.run([lambda i=i: piece(i) for i in range(2)]) == [0, 1]
    assert len(set(names)) == 2 and all(n.startswith("minigrad") for n in names)


def test_a_piece_runs_its_own_pieces_in_its_thread(restore_threads):
    threads.set_threads(2)

    def outer(i):
        here = threading.current_thread().name
        inner = threads.run([lambda: threading.current_thread().name] * 3)
        return i, inner == [here] * 3

    assert threads.run([lambda i=i: outer(i) for i in range(4)]) == [(i, True) for i in range(4)]


def test_add_up_adds_in_the_pieces_order(restore_threads):
    values = [1e16, 1.0, -1e16, 1.0]   # float addition is not associative: order shows
    in_order = 0.0
    for v in values:
        in_order += v
    for n in (1, 2, 3):
        threads.set_threads(n)
        total = threads.add_up([lambda v=v: np.float64(v) for v in values], np.zeros(()))
        assert total == in_order


CASES = {   # x shape, weight shape, stride, padding: each kernel path that splits its blocks
    "blocked im2col, short contraction": ((8, 1, 20, 20), (6, 1, 5, 5), 1, 2),
    "blocked im2col, long contraction, strided": ((8, 16, 17, 17), (24, 16, 3, 3), 2, 1),
    "Winograd forward, dx as a correlation": ((8, 32, 12, 12), (32, 32, 3, 3), 1, 1),
    "Winograd forward and weight gradient": ((4, 64, 8, 8), (64, 64, 3, 3), 1, 1),
}


def _step(case, dtype):
    x_shape, w_shape, stride, padding = CASES[case]
    rng = np.random.default_rng(7)
    x = mg.tensor(rng.standard_normal(x_shape).astype(dtype), requires_grad=True)
    w = mg.tensor(rng.standard_normal(w_shape).astype(dtype), requires_grad=True)
    out = mg.ops.conv2d(x, w, stride=stride, padding=padding)
    g = mg.tensor(rng.standard_normal(out.shape).astype(dtype))
    return [t.detach().numpy().copy() for t in (out, *mg.grad(out, [x, w], g))]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", CASES)
def test_conv2d_gives_the_same_bits_at_one_and_two_threads(case, dtype, restore_threads,
                                                           monkeypatch):
    kernel = CPU.kernel("conv2d")
    monkeypatch.setattr(kernel, "block_elements", 4096)   # many blocks to share out
    monkeypatch.setattr(kernel.winograd, "block_elements", 4096)
    mg.set_num_threads(1)
    one = _step(case, dtype)
    mg.set_num_threads(2)
    two = _step(case, dtype)
    for a, b in zip(one, two, strict=True):
        assert a.dtype == b.dtype == dtype
        assert np.array_equal(a, b)
