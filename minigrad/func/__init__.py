"""Function transforms, as torch.func: `vmap`, `grad`, `grad_and_value`, `vjp`, `jvp`, `jacrev`,
`jacfwd`, `hessian`, `functional_call` and `replace_all_batch_norm_modules_`
(docs/transforms.md). They compose: `vmap(grad(loss))` gives one gradient per example,
`jacfwd(jacrev(f))` a Hessian."""
from . import functional
from .batch_norm import replace_all_batch_norm_modules_
from .forward import jacfwd, jvp
from .functional_call import functional_call
from .grad import grad, grad_and_value, vjp
from .jacobian import hessian, jacrev
from .vmap import vmap

__all__ = ["functional_call", "grad", "grad_and_value", "hessian", "jacfwd", "jacrev", "jvp",
           "replace_all_batch_norm_modules_", "vjp", "vmap"]
