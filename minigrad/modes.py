"""How many levels of the modes that change what an op call does are open, in any thread:
vmap levels (a batching rule runs the call, minigrad/func/vmap.py) and dual levels (forward
mode pushes tangents, minigrad/forward_ad.py). Each mode keeps its levels per thread; `Op.apply`
reads this one plain global first, so an eager call pays a few nanoseconds for both instead of
a thread-local read each (mg.compile's captures have their own count, `tracing.capturing`)."""
import threading

open_levels = 0
_counting = threading.Lock()


def opened():
    """A vmap or dual level begins (in some thread)."""
    global open_levels
    with _counting:
        open_levels += 1


def closed():
    """A level that `opened` counted ends."""
    global open_levels
    with _counting:
        open_levels -= 1
