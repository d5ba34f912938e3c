"""`replace_all_batch_norm_modules_`, as torch.func's: batch norms that vmap can batch."""
from ..nn.batchnorm import _BatchNorm


def replace_all_batch_norm_modules_(root):
    """Make every batch norm in `root` (itself included) use batch statistics without running
    ones, in place, and return `root`: a training-mode batch norm moves its running_mean and
    running_var in place, which cannot be batched inside vmap (jacfwd, hessian, per-sample
    gradients). The buffers are dropped, as torch.func.replace_all_batch_norm_modules_ does."""
    for module in root.modules():
        if isinstance(module, _BatchNorm):
            module.running_mean = module.running_var = module.num_batches_tracked = None
            module.track_running_stats = False
    return root
