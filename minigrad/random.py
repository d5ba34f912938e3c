"""Random number generators, as PyTorch's `torch.Generator`, and the draws behind the random
functions (`randn`, `multinomial`, `bernoulli`, dropout masks, parameter initialisation).

A `Generator` is one independent, reproducible stream: NumPy's PCG64 seeded with its seed, so
`g = mg.Generator().manual_seed(2147483647)` then `mg.randn(27, 10, generator=g)` gives the same
numbers on every run, whatever else draws from other generators. The numbers differ from
PyTorch's (another bit generator), the way they are used does not.

`mg.default_generator` is the stream every random function uses without `generator=`;
`mg.manual_seed` seeds it (and the per-device streams dropout draws its masks from on a GPU).
At import it is seeded from the operating system's entropy, as PyTorch's default is; a fresh
`Generator()` starts from PyTorch's fixed default seed, 67280421310721.

Draws are made on the CPU (so a seed gives the same tensor on every device), except dropout's
masks on a GPU, which come from that device's own generator (`device_generator`).
"""
import copy

import numpy

from . import tracing
from .backends import get_backend
from .dtypes import is_floating
from .vmap_levels import random_levels

DEFAULT_SEED = 67280421310721   # torch.Generator().initial_seed()
_SEEDS = 1 << 64                # seeds are taken modulo 2**64, as in PyTorch


class Generator:
    """A stream of random numbers (PyTorch's `torch.Generator`): `manual_seed(seed)` (returns
    the generator, so `g = mg.Generator().manual_seed(0)` works), `seed()` (a fresh seed from
    the OS, returned), `initial_seed()`, `get_state()` / `set_state(state)`.

    device: "cpu" (default) or "cuda": a CUDA generator draws with the device's array library
    (CuPy), for draws made on the GPU; the random functions take CPU generators, as they draw on
    the CPU. `get_state()` is a copy of NumPy's bit-generator state (a dict of str and int, which
    `mg.save` can store), not PyTorch's byte tensor."""

    def __init__(self, device="cpu"):
        self._backend = get_backend(device)
        self.device = self._backend.device
        self.manual_seed(DEFAULT_SEED)

    def manual_seed(self, seed):
        if isinstance(seed, bool) or not isinstance(seed, (int, numpy.integer)) \
                or not -(1 << 63) <= seed < _SEEDS:
            raise ValueError(f"Generator.manual_seed: the seed must be an integer in "
                             f"[-2**63, 2**64), got {seed!r}")
        self._seed = int(seed) % _SEEDS
        self._stream = self._backend.xp.random.default_rng(self._seed)
        return self

    def seed(self):
        """Seed with fresh entropy from the operating system and return that seed."""
        seed = int(numpy.random.SeedSequence().generate_state(1, numpy.uint64)[0])
        self.manual_seed(seed)
        return seed

    def initial_seed(self):
        """The seed this generator's stream started from."""
        return self._seed

    def get_state(self):
        """A copy of the stream's state (NumPy's bit-generator state), for `set_state`."""
        self._cpu_only("get_state")
        return copy.deepcopy(self._stream.bit_generator.state)

    def set_state(self, new_state):
        """Continue the stream from `new_state`, as `get_state()` returned it."""
        self._cpu_only("set_state")
        self._stream = generator_from_state(new_state, "Generator.set_state")
        return self

    def _cpu_only(self, what):
        if self.device != "cpu":
            raise NotImplementedError(f"Generator.{what}: only CPU generators have a state to "
                                      f"save and restore, this one is on {self.device!r}")

    def __repr__(self):
        return f"minigrad.Generator(device={self.device!r}, initial_seed={self._seed})"


def generator_from_state(state, where):
    """A NumPy generator whose bit generator is in `state`, or a clear error naming `where`."""
    name = state.get("bit_generator") if isinstance(state, dict) else None
    bit_generator_type = getattr(numpy.random, str(name), None)
    if not isinstance(bit_generator_type, type) or \
            not issubclass(bit_generator_type, numpy.random.BitGenerator):
        raise ValueError(f"{where}: expected a NumPy bit-generator state (a dict with "
                         f"'bit_generator', e.g. from get_rng_state()), got {state!r:.200}")
    bit_generator = bit_generator_type()
    try:
        bit_generator.state = copy.deepcopy(state)
    except (TypeError, ValueError, KeyError) as error:
        raise ValueError(f"{where}: not a valid {name} state ({error})") from error
    return numpy.random.Generator(bit_generator)


default_generator = Generator()
default_generator.seed()
_device_generators = {}   # backend -> its array library's generator, seeded by manual_seed


def manual_seed(seed):
    """Seed the default generator (randn, rand, parameter initialisation, dropout, shuffling)
    and the GPU's generator for dropout masks; returns the default generator."""
    default_generator.manual_seed(seed)
    _device_generators.clear()
    return default_generator


def seed():
    """Seed the default generator from the operating system's entropy; returns the seed."""
    _device_generators.clear()
    return default_generator.seed()


def initial_seed():
    """The seed the default generator started from."""
    return default_generator.initial_seed()


def get_rng_state():
    """A copy of the default generator's state (`Generator.get_state`), e.g. for a checkpoint.
    Like PyTorch's `torch.get_rng_state`, it does not cover the GPU's own generator."""
    return default_generator.get_state()


def set_rng_state(new_state):
    """Continue the default generator from `new_state`, as `get_rng_state()` returned it."""
    default_generator._stream = generator_from_state(new_state, "set_rng_state")


def numpy_generator(generator, op, batchable=False):
    """The NumPy generator to draw from for `op(..., generator=generator)`: the default
    generator's for None, a CPU `Generator`'s stream, or a NumPy Generator as it is. Inside
    vmap a draw follows its randomness= (`random_levels`; `batchable`: `op` draws a batch)."""
    random_levels(op, batchable)
    tracing.random_draw(op)
    if generator is None:
        return default_generator._stream
    if isinstance(generator, numpy.random.Generator):
        return generator
    if not isinstance(generator, Generator):
        raise TypeError(f"{op}: generator must be a minigrad.Generator (or a "
                        f"numpy.random.Generator), not {type(generator).__name__}")
    if generator.device != "cpu":
        raise RuntimeError(f"{op}: expected a 'cpu' generator (draws are made on the CPU), "
                           f"got one on {generator.device!r}")
    return generator._stream


def device_generator(backend):
    """The default stream for draws made on `backend`'s device: the default generator's on
    the CPU; on a GPU, that device's own (seeded like the default one; other numbers)."""
    tracing.random_draw("a random draw")
    if backend.device == "cpu":
        return default_generator._stream
    if backend not in _device_generators:
        _device_generators[backend] = backend.xp.random.default_rng(initial_seed())
    return _device_generators[backend]


def multinomial_indices(op, weights, num_samples, replacement, generator):
    """`num_samples` category indices per row of the non-negative `weights` (a 1-d or 2-d
    float NumPy array), int64, with probabilities proportional to the weights.

    With replacement: each draw is the first category whose cumulative weight exceeds u * total
    (u uniform in [0, 1)). Without: the categories of the `num_samples` smallest keys E_i / w_i
    (E_i exponential), which draws one category after another, each in proportion to the
    weights of those not yet drawn."""
    if not is_floating(weights.dtype):
        raise RuntimeError(f"{op}: only supports floating-point dtypes for input, got "
                           f"{weights.dtype}")
    if weights.ndim not in (1, 2):
        raise RuntimeError(f"{op}: prob_dist must be 1 or 2 dim, got shape {weights.shape}")
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, numpy.integer)) \
            or num_samples <= 0:
        raise RuntimeError(f"{op}: cannot sample num_samples={num_samples!r} samples (must be "
                           f"a positive int)")
    rows = numpy.atleast_2d(weights).astype(numpy.float64)
    if not numpy.all(numpy.isfinite(rows)) or numpy.any(rows < 0):
        raise RuntimeError(f"{op}: probability tensor contains either `inf`, `nan` or "
                           f"element < 0")
    totals = rows.sum(axis=1)
    if numpy.any(totals <= 0):
        raise RuntimeError(f"{op}: invalid multinomial distribution (sum of probabilities "
                           f"<= 0)")
    rng = numpy_generator(generator, op)
    if replacement:
        cumulative = numpy.cumsum(rows, axis=1)
        u = rng.random((rows.shape[0], num_samples)) * totals[:, None]
        picks = numpy.stack([numpy.searchsorted(c, r, side="right")
                             for c, r in zip(cumulative, u, strict=True)])
        picks = numpy.minimum(picks, rows.shape[1] - 1)   # u * total rounded up to total
    else:
        if num_samples > rows.shape[1]:
            raise RuntimeError(f"{op}: cannot sample n_sample ({num_samples}) > "
                               f"prob_dist.size(-1) ({rows.shape[1]}) samples without "
                               f"replacement")
        with numpy.errstate(divide="ignore"):
            keys = rng.standard_exponential(rows.shape) / rows
        picks = numpy.argsort(keys, axis=1, kind="stable")[:, :num_samples]
    picks = picks.astype(numpy.int64)
    return picks[0] if weights.ndim == 1 else picks


def bernoulli_draws(op, p, shape, generator):
    """An array of `shape`: 1.0 with probability p, else 0.0, where p (a number or a NumPy
    array) is broadcast to `shape`."""
    try:
        p = numpy.broadcast_to(numpy.asarray(p, dtype=numpy.float64), shape)
    except ValueError:
        raise RuntimeError(f"{op}: the probabilities of shape {numpy.shape(p)} do not "
                           f"broadcast to the shape {shape}") from None
    if not numpy.all((p >= 0) & (p <= 1)):
        raise RuntimeError(f"{op}: expected every probability p in 0 <= p <= 1")
    return (numpy_generator(generator, op).random(shape) < p).astype(numpy.float64)
