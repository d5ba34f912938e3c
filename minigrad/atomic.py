"""Atomic file writes, shared by checkpoints, dataset downloads and graph pictures.

The bytes go to a temporary file in the target's directory, are flushed and fsync'ed, and only
then renamed over the target (`os.replace`, atomic on POSIX and Windows). A crash or an exception
mid-write leaves any earlier file under that name as it was.

- The rename replaces whatever is at the name, a planted symlink included: the write never
  follows a link to somewhere else.
- Replacing a file keeps its permission bits (a 0600 checkpoint stays 0600), and saving over a
  file the user may not write is a PermissionError, as `open(path, "w")` would be, although the
  rename alone would be allowed by the folder's permissions.
- Temporaries are named `.<name>~<host>~<pid>~<random>.tmp`. A process killed mid-write (kill -9
  runs no cleanup) leaves its temporary behind; the next write into the same folder removes the
  temporaries whose writer process on this host is gone, never one a live process is writing.
- Errors name the user's path, not the hidden temporary.
"""
import errno
import os
import re
import socket
import stat
import uuid

_TEMPORARY = re.compile(r"^\..+~(?P<host>[^~]+)~(?P<pid>\d+)~[0-9a-f]{12}\.tmp$")


def atomic_write(path, write):
    """Create or replace `path` with what `write(file)` writes to a binary file object."""
    path = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(path))
    previous = _regular_file_stat(path)
    if previous is not None and not _may_write(path):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
    remove_stale_temporaries(directory)
    temporary = os.path.join(directory, f".{name}~{_host()}~{os.getpid()}~{uuid.uuid4().hex[:12]}"
                                        ".tmp")
    try:
        # Mode 0o666 lets the umask decide the permissions of a new file, as open() would.
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                             | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError as error:
        raise _naming(error, path) from None
    try:
        with os.fdopen(descriptor, "wb") as file:
            if previous is not None and hasattr(os, "fchmod"):
                os.fchmod(file.fileno(), stat.S_IMODE(previous.st_mode))
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        if os.path.lexists(temporary):
            os.remove(temporary)
        if isinstance(error, OSError) and error.filename in (None, temporary):
            raise _naming(error, path) from None
        raise
    _sync_directory(directory)


def remove_stale_temporaries(directory):
    """Remove the temporaries in `directory` left by writers on this host that no longer run.
    Returns the names removed. Temporaries of live processes and of other hosts (a shared
    network folder) are left alone: nothing here can tell whether those writers are done."""
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        match = _TEMPORARY.match(entry.name)
        if match is None or match["host"] != _host() or _process_alive(int(match["pid"])):
            continue
        try:
            os.remove(entry.path)
            removed.append(entry.name)
        except OSError:   # another writer cleaned it up first, or we may not remove it
            pass
    return removed


def _host():
    """This machine's name, reduced to characters that are safe in a file name."""
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "localhost"


def _process_alive(pid):
    """Whether process `pid` runs here (a zombie, killed but not yet reaped, does not count)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # it exists, and belongs to another user
        return True
    except OSError:           # e.g. Windows, where signal 0 is not a probe: assume alive
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            return file.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def _regular_file_stat(path):
    """os.stat of `path` when it is a regular file (not a symlink), else None."""
    try:
        status = os.lstat(path)
    except OSError:
        return None
    return status if stat.S_ISREG(status.st_mode) else None


def _may_write(path):
    """Whether open(path, "w") would be allowed, judged with the effective user (as open())."""
    effective = os.access in os.supports_effective_ids
    return os.access(path, os.W_OK, effective_ids=effective)


def _naming(error, path):
    """`error` (an OSError) with the user's `path` as its file name instead of the temporary."""
    if error.errno is None:
        return error
    return type(error)(error.errno, error.strerror, path)


def _sync_directory(directory):
    """Make the rename itself durable (POSIX); a no-op where directories cannot be opened."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
