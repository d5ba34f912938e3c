"""Nested arguments as torch.func reads them: tuples, lists and dicts of tensors (and of other
values), flattened to their leaves and built again."""


def flatten(tree):
    """(the leaves of `tree`, left to right, and a spec that `unflatten` builds it again from)."""
    if isinstance(tree, (tuple, list)):
        parts = [flatten(item) for item in tree]
        return [leaf for leaves, _ in parts for leaf in leaves], (type(tree), [s for _, s in parts])
    if isinstance(tree, dict):
        parts = [flatten(item) for item in tree.values()]
        return ([leaf for leaves, _ in parts for leaf in leaves],
                (dict, list(tree), [s for _, s in parts]))
    return [tree], None


def unflatten(leaves, spec):
    """The tree of `spec` with `leaves` in its places."""
    leaves = iter(leaves)
    return _build(leaves, spec)


def _build(leaves, spec):
    if spec is None:
        return next(leaves)
    if spec[0] is dict:
        return {key: _build(leaves, s) for key, s in zip(spec[1], spec[2], strict=True)}
    kind, specs = spec
    items = [_build(leaves, s) for s in specs]
    return kind(*items) if hasattr(kind, "_fields") else kind(items)   # named tuples too


def leaves_of(tree):
    return flatten(tree)[0]


def broadcast_prefix(prefix, tree, what):
    """One value of `prefix` per leaf of `tree`: `prefix` has the structure of `tree` down to
    some depth, and a value standing for a subtree applies to all its leaves (in_dims=(0, None),
    out_dims=1). A prefix that does not fit the tree is a ValueError naming `what`."""
    if not isinstance(prefix, (tuple, list, dict)):
        return [prefix] * len(leaves_of(tree))
    fits = (isinstance(tree, dict) and isinstance(prefix, dict) and set(tree) == set(prefix)) or (
        isinstance(tree, (tuple, list)) and isinstance(prefix, (tuple, list))
        and len(tree) == len(prefix))
    if not fits:
        raise ValueError(f"{what} is not compatible with the structure of the values: {what} "
                         f"has structure {_structure(prefix)} but the values have structure "
                         f"{_structure(tree)}")
    if isinstance(tree, dict):
        return [d for key in tree for d in broadcast_prefix(prefix[key], tree[key], what)]
    return [d for p, t in zip(prefix, tree, strict=True) for d in broadcast_prefix(p, t, what)]


def _structure(tree):
    if isinstance(tree, dict):
        return "{" + ", ".join(f"{k!r}: {_structure(v)}" for k, v in tree.items()) + "}"
    if isinstance(tree, (tuple, list)):
        inside = ", ".join(_structure(item) for item in tree)
        return f"({inside},)" if isinstance(tree, tuple) and len(tree) == 1 else (
            f"({inside})" if isinstance(tree, tuple) else f"[{inside}]")
    return "*"
