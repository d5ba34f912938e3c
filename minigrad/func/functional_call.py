"""`functional_call`: a module run with other tensors in place of its parameters and buffers,
as torch.func.functional_call, so a model is a function of its weights (grad, vmap)."""


def functional_call(module, parameter_and_buffer_dicts, args, kwargs=None, *, strict=False):
    """module(*args, **kwargs) with the tensors of `parameter_and_buffer_dicts` (a dict from
    names as in `named_parameters()` / `named_buffers()`, or a tuple of such dicts) in place of
    the module's own for the call; the module is as it was afterwards. strict=True asks for
    every parameter and buffer to be given."""
    dicts = parameter_and_buffer_dicts
    dicts = tuple(dicts) if isinstance(dicts, (tuple, list)) else (dicts,)
    given = {}
    for d in dicts:
        for name, value in d.items():
            if name in given:
                raise ValueError(f"functional_call: {name!r} is given in more than one dict")
            given[name] = value
    known = {name for name, _ in module.named_parameters(remove_duplicate=False)} | {
        name for name, _ in module.named_buffers(remove_duplicate=False)}
    unknown = sorted(set(given) - known)
    missing = sorted(known - set(given))
    if unknown or (strict and missing):
        raise RuntimeError(f"functional_call: {type(module).__name__} has no parameter or "
                           f"buffer named {unknown}" if unknown else
                           f"functional_call: strict=True but {missing} were not given")
    args = args if isinstance(args, tuple) else (args,)
    swapped = [_swap(module, name, value) for name, value in given.items()]
    try:
        return module(*args, **(kwargs or {}))
    finally:
        for registry, name, old in reversed(swapped):
            registry[name] = old


def _swap(module, dotted, value):
    """Put `value` in place of the parameter or buffer `dotted`; (its registry, name, old)."""
    *path, name = dotted.split(".")
    for part in path:
        module = module._modules[part]
    registry = module._parameters if name in module._parameters else module._buffers
    old = registry[name]
    registry[name] = value
    return registry, name, old
