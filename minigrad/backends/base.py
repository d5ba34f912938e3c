"""The backend protocol: what an op may ask of the place its arrays live."""
import functools


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
    # True where reading device data to the host stalls the device (the GPU): `check` then
    # waits for the next read the user makes anyway instead of adding one per call.
    defers_checks = False
    _MAX_PENDING = 64   # deferred checks are resolved (one read) at most this many calls apart

    def __init__(self):
        self.kernels = {}
        self._pending = []

    def check(self, failed, describe, error=ValueError):
        """Raise error(describe()) where the 0-d boolean array `failed` holds True: at once,
        or, on a backend that defers checks, at the next `to_numpy` (Tensor.numpy, item, ...)."""
        if not self.defers_checks:
            if bool(failed):
                raise error(describe())
            return
        self._pending.append((failed, describe, error))
        if len(self._pending) >= self._MAX_PENDING:
            self.resolve_checks()

    def resolve_checks(self):
        """Raise for the first deferred check that failed, reading all of them in one copy."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        flags = self.to_host(*[failed for failed, _, _ in pending])
        for (_, describe, error), failed in zip(pending, flags, strict=True):
            if failed:
                raise error(describe() + " (found at the first read of device data after "
                                 "the call)")

    def to_host(self, *scalars):
        """0-d arrays of this backend as Python numbers, read together: one copy where a read
        stalls the device (the GPU); on the CPU each is read alone (stacking costs more)."""
        if self.defers_checks:
            return self.xp.stack(scalars).tolist()
        return [s.item() for s in scalars]

    def asarray(self, data, dtype=None):
        """Put `data` (a scalar, a nested list or any array) on this backend's device."""
        return self.xp.asarray(data, dtype=dtype)

    def placeholder(self, shape, dtype):
        """A read-only array of `shape` (a tuple) and `dtype` (a dtype of this backend) with no
        memory of its own (a broadcast view of one zero): what a data-free stand-in tensor
        carries (Tensor._without_data). Nothing can write into it, so one per shape and dtype
        is made and shared: a backward frees a dozen nodes' inputs per step, and making each
        anew (broadcast_to) costs microseconds."""
        return _placeholder(self.xp, shape, dtype)

    def to_numpy(self, array):
        """A NumPy copy (or view, on the CPU) of one of this backend's arrays; deferred checks
        are resolved first."""
        self.resolve_checks()
        return self._to_numpy(array)

    def _to_numpy(self, array):
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


@functools.lru_cache(maxsize=1024)
def _placeholder(xp, shape, dtype):
    return xp.broadcast_to(xp.zeros((), dtype), shape)
