"""Function transforms, as torch.func: `vmap` (docs/vmap.md), `grad`, `grad_and_value`, `vjp`,
`jacrev`, `hessian` and `functional_call`. They compose: `vmap(grad(loss))` gives one gradient
per example, `jacrev(jacrev(f))` a Hessian. (`jvp`, `jacfwd` need forward mode.)"""
from . import functional
from .functional_call import functional_call
from .grad import grad, grad_and_value, vjp
from .jacobian import hessian, jacrev
from .vmap import vmap

__all__ = ["functional_call", "grad", "grad_and_value", "hessian", "jacrev", "vjp", "vmap"]
