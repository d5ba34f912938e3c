"""The backend protocol: what an op may ask of the place its arrays live."""


class Backend:
    """One array library on one device.

    name    -- "numpy" | "cupy"
    device  -- "cpu" | "cuda"
    xp      -- the array module; ops use only NumPy functions that CuPy implements the same way
    kernels -- the kernels ops ask for by name ("batch_norm", "conv2d"): array code tuned for
               this device, or compiled kernels; each of minigrad's backends registers both
    """

    name: str
    device: str
    xp = None

    def __init__(self):
        self.kernels = {}

    def asarray(self, data, dtype=None):
        """Put `data` (a scalar, a nested list or any array) on this backend's device."""
        return self.xp.asarray(data, dtype=dtype)

    def to_numpy(self, array):
        """A NumPy copy (or view, on the CPU) of one of this backend's arrays."""
        raise NotImplementedError

    def owns(self, array):
        """True when `array` is one of this backend's arrays."""
        return isinstance(array, self.xp.ndarray)

    def kernel(self, name):
        """The kernel registered as `name`, or None."""
        return self.kernels.get(name)

    def __repr__(self):
        return f"<minigrad backend {self.name} on {self.device}>"

    # One backend per device: copies of tensors (copy.deepcopy(model)) share it, so ops can
    # still tell that their inputs live on the same device.
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self
