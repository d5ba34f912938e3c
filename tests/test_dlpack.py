"""mg.from_dlpack and Tensor.__dlpack__ on the CPU: memory is shared both ways, with NumPy and
PyTorch; objects without DLPack are a clear error. (GPU memory: tests/test_gpu.py.)"""
import numpy as np
import pytest
import torch

import minigrad as mg


def test_from_dlpack_shares_numpy_memory():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = mg.from_dlpack(array)
    assert (tensor.device, tensor.dtype, tensor.shape) == ("cpu", np.float32, (2, 3))
    assert not tensor.requires_grad
    array[0, 0] = 42
    assert tensor.numpy()[0, 0] == 42


def test_from_dlpack_shares_torch_memory_both_ways():
    source = torch.arange(4, dtype=torch.float64)
    tensor = mg.from_dlpack(source)
    assert tensor.dtype == np.float64
    source[1] = -1
    assert tensor.numpy()[1] == -1
    back = torch.from_dlpack(tensor)
    back[2] = 9
    assert tensor.numpy()[2] == 9 and source[2] == 9


def test_a_tensor_from_dlpack_takes_part_in_autograd():
    tensor = mg.from_dlpack(np.array([1.0, 2.0, 3.0])).requires_grad_()
    (tensor * tensor).sum().backward()
    np.testing.assert_array_equal(tensor.grad.numpy(), [2.0, 4.0, 6.0])


def test_objects_without_dlpack_are_refused():
    with pytest.raises(TypeError, match="a list does not support DLPack"):
        mg.from_dlpack([1.0, 2.0])
