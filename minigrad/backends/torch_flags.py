"""PyTorch's backend switches under the rename: `torch.backends.cudnn` and `torch.backends.cuda`
become `mg.backends.cudnn` and `mg.backends.cuda` (this package), and `torch.backends.mps`
`mg.backends.mps`. Scripts set them at the top (`cudnn.benchmark = True`,
`cuda.matmul.allow_tf32 = True`); minigrad has neither cuDNN nor TF32 math nor MPS, so each
switch keeps the value it is given, with PyTorch's defaults, and changes nothing."""


class _Switches:
    """Attributes with defaults that keep whatever a script sets."""

    def __init__(self, **defaults):
        self.__dict__.update(defaults)

    def __repr__(self):
        return f"{type(self).__name__}({self.__dict__})"


class _Cudnn(_Switches):
    def is_available(self):
        """False: minigrad's GPU code (CuPy) does not use cuDNN."""
        return False

    def version(self):
        return None


class _Cuda(_Switches):
    def is_built(self):
        """False: minigrad is not built against CUDA (CuPy brings it, when installed)."""
        return False


class _Mps(_Switches):
    def is_available(self):
        return False

    def is_built(self):
        return False


cudnn = _Cudnn(enabled=True, benchmark=False, deterministic=False, allow_tf32=True)
cuda = _Cuda(matmul=_Switches(allow_tf32=False, allow_fp16_reduced_precision_reduction=True,
                              allow_bf16_reduced_precision_reduction=True))
mps = _Mps()
