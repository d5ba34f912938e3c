"""The logic behind three GPU caveats, run on NumPy (test_gpu.py runs them on CuPy):

- integer indices are bounds-checked by minigrad against xp (CuPy's gather would wrap them);
- dropout draws its mask with the input's device generator, never copying a mask from the host;
- cross_entropy's target range check goes through `backend.check`, which a GPU backend defers
  to the next host read instead of syncing on every call.

A stand-in device (the NumPy backend under another name) plays the GPU's part.
"""
import numpy as np
import pytest

import minigrad as mg
from minigrad.backends import NumpyBackend
from minigrad.random import device_generator as generator
from minigrad.tensor import Tensor


class StandInDevice(NumpyBackend):
    """NumPy arrays on a device that is not the CPU; copies from the host are refused, and
    checks are deferred like the CuPy backend's."""
    name, device = "stand-in", "stand-in"
    defers_checks = True

    def asarray(self, data, dtype=None):
        raise AssertionError("copied data from the host to the device")


def on_device(array, backend):
    return Tensor.from_array(np.asarray(array), backend)


# ---------------------------------------------------------------- indexing bounds

@pytest.mark.parametrize("index, axis, size, bad", [
    (np.array([0, 3]), 0, 3, 3),
    (np.array([-4]), 0, 3, -4),
    ((slice(None), np.array([[1], [4]])), 1, 4, 4),
    ((Ellipsis, np.array([5])), 2, 5, 5),
    ((None, 1, np.array([-5])), 1, 4, -5),
    ((np.array([True, False, True]), np.array([4])), 1, 4, 4),
    ((np.array([0]), Ellipsis, np.array([7])), 2, 5, 7),
])
def test_out_of_range_integer_arrays_raise_before_the_gather(index, axis, size, bad):
    x = mg.randn(3, 4, 5)
    # the message is minigrad's (NumPy's own says "out of bounds"): the check ran, not NumPy's
    with pytest.raises(IndexError, match=rf"getitem: index {bad} is out of range for axis "
                                         rf"{axis} of size {size}: expected indices in "
                                         rf"\[{-size}, {size}\) \(tensor of shape \(3, 4, 5\)\)"):
        x[index]


@pytest.mark.parametrize("index", [np.array([0, 2, -3]), (slice(None), np.array([3, -4])),
                                   (Ellipsis, np.array([4, -5])), (0, 1, np.array([4]))])
def test_in_range_indices_still_gather(index):
    x = mg.randn(3, 4, 5)
    np.testing.assert_array_equal(x[index].numpy(), x.numpy()[index])


def test_index_tensors_are_checked_too():
    x = mg.randn(3, 4)
    with pytest.raises(IndexError, match="index 3 is out of range for axis 0 of size 3"):
        x[mg.tensor([1, 3])]


class DeferringDevice(NumpyBackend):
    """A stand-in device that defers checks but takes arrays as they are (an index array)."""
    name, device = "deferring", "deferring"
    defers_checks = True


@pytest.mark.parametrize("backend", [NumpyBackend(), DeferringDevice()], ids=["cpu", "device"])
def test_index_bounds_are_read_as_python_ints_on_either_kind_of_backend(backend, monkeypatch):
    """Backend.to_host: one stacked copy where a read stalls the device, plain reads on the
    CPU; the bounds check reads the smallest and largest index either way."""
    stacked = []
    monkeypatch.setattr(np, "stack", lambda arrays: stacked.append(len(arrays)) or np.array(
        [a.item() for a in arrays]))
    assert backend.to_host(np.array(7), np.array(-2)) == [7, -2]
    x, index = on_device(np.zeros((3, 4)), backend), on_device(np.array([0, 3]), backend)
    with pytest.raises(IndexError, match="index 3 is out of range for axis 0 of size 3"):
        x[index]
    assert stacked == ([2, 2] if backend.defers_checks else [])


# ---------------------------------------------------------------- dropout on the device

def test_dropout_draws_its_mask_on_the_inputs_device():
    device = StandInDevice()
    mg.manual_seed(5)
    cpu_state = generator(mg.get_backend("cpu")).bit_generator.state
    x = on_device(np.ones((200, 50), np.float32), device)
    y = mg.nn.functional.dropout(x, 0.25)
    assert y.backend is device
    # the CPU generator drew nothing
    assert generator(mg.get_backend("cpu")).bit_generator.state == cpu_state
    values = set(np.unique(y.array).tolist())
    assert values == {0.0, np.float32(1 / 0.75)}
    assert abs((y.array == 0).mean() - 0.25) < 0.02
    mg.manual_seed(5)   # the device generator is seeded too
    again = mg.nn.functional.dropout(on_device(np.ones((200, 50), np.float32), device), 0.25)
    np.testing.assert_array_equal(again.array, y.array)
    other = mg.nn.functional.dropout(on_device(np.ones((200, 50), np.float32), device), 0.25)
    assert (other.array != y.array).any()


def test_dropout_on_the_cpu_keeps_the_seeded_cpu_generator():
    mg.manual_seed(3)
    y = mg.nn.functional.dropout(mg.ones(30, 40), 0.5)
    mg.manual_seed(3)
    keep = generator(mg.get_backend("cpu")).random((30, 40), dtype=np.float32) >= 0.5
    np.testing.assert_array_equal(y.numpy(), keep * np.float32(2.0))


# ---------------------------------------------------------------- cross_entropy checks

def _logits_and_target(backend, target):
    logits = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    return on_device(logits, backend), on_device(np.array(target), backend)


def test_a_deferring_backend_raises_a_bad_target_at_the_next_host_read():
    device = StandInDevice()
    loss = mg.nn.functional.cross_entropy(*_logits_and_target(device, [0, 1, 7, 2]))  # no error
    good = mg.nn.functional.cross_entropy(*_logits_and_target(device, [0, 1, 2, 2]))
    with pytest.raises(ValueError, match=r"cross_entropy: target holds class index 7, outside "
                                         r"\[0, 3\) for input of shape \(4, 3\) \(found at the "
                                         r"first read of device data after the call\)"):
        loss.item()
    assert np.isfinite(good.item())   # resolved: nothing pending any more


def test_deferred_checks_are_resolved_after_a_bounded_number_of_calls():
    device = StandInDevice()
    logits, bad = _logits_and_target(device, [0, 3, 1, 1])
    with pytest.raises(ValueError, match="class index 3"):
        for _ in range(device._MAX_PENDING):
            mg.nn.functional.cross_entropy(logits, bad)
    assert device._pending == []


def test_the_cpu_raises_a_bad_target_at_once():
    logits = mg.randn(4, 3)
    with pytest.raises(ValueError, match=r"class index -1, outside \[0, 3\)"):
        mg.nn.functional.cross_entropy(logits, mg.tensor([0, -1, 1, 2]))
