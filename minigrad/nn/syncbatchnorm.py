"""SyncBatchNorm: batch norm whose training statistics are those of the global batch, the
concatenation of every rank's local batch.

    y = sync_normalize(x, axes=(0, 2, ...))[0] * weight + bias

`distributed.sync_normalize` is `normalize` with its statistics merged across ranks (one
all_gather of 2C + 1 numbers forward, one all_reduce of 2C backward). With `fused` (the default,
"auto") the whole line is one op, `distributed.sync_batch_norm.sync_batch_norm` (the batch-norm
kernel's affine pass and sums); `fused=False` records sync_normalize, mul and add. Running
statistics move with the global batch's statistics and the unbiased variance from the global
count, so they are the same on every rank. Evaluation uses the running statistics and
communicates nothing. Without an initialized process group, or in a world
of one, it is BatchNorm (as in PyTorch). Everything else -- parameters, buffers, state_dict keys,
momentum rules, validation -- is the BatchNorm layers'.
"""
from .. import distributed
from ..distributed.sync_batch_norm import composed_sync_batch_norm, sync_batch_norm
from .batch_norm_core import update_running_stats
from .batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d, _BatchNorm


class SyncBatchNorm(_BatchNorm):
    """Batch norm over (N, C, *) input with the statistics of the batch of all ranks together;
    see the module docstring. Arguments as for BatchNorm2d."""

    _dims = (2, 3, 4, 5)

    def forward(self, input):
        if not (self.training and distributed.is_initialized()
                and distributed.get_world_size() > 1):
            return super().forward(input)
        self._check_input(input, batch_facts=False)   # the step checks across ranks
        step = composed_sync_batch_norm if self.fused is False else sync_batch_norm
        # the count of every rank's values as a 0-d array: the running statistics' update
        # reads it (a compiled step, replayed, reads each call's), Python only where it counts
        y, mean, var, count = step(input, self.weight, self.bias, self.eps, check=self,
                                   count_tensor=True)
        if self.track_running_stats:
            counted = None if self._population_count is None else int(count.item())
            with self._counted_batch(counted) as factor:
                update_running_stats(self.running_mean, self.running_var, mean.reshape(-1),
                                     var.reshape(-1), count.array, factor)
        return y

    @classmethod
    def convert_sync_batchnorm(cls, module):
        """`module` with every BatchNorm1d/2d/3d in it replaced by a SyncBatchNorm that holds the
        same parameters, buffers and settings (the objects themselves, so an optimizer built
        before still holds them). Returns the new module if `module` itself was one."""
        if type(module) in (BatchNorm1d, BatchNorm2d, BatchNorm3d):
            sync = cls(module.num_features, module.eps, module.momentum, module.affine,
                       module.track_running_stats, scale=module.scale, center=module.center,
                       fused=module.fused, memory=module.memory)
            for registry in ("_parameters", "_buffers"):
                for name, tensor in getattr(module, registry).items():
                    getattr(sync, registry)[name] = tensor
            sync.train(module.training)
            return sync
        for name, child in list(module._modules.items()):
            if child is not None:
                module._modules[name] = cls.convert_sync_batchnorm(child)
        return module
