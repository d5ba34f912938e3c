"""Atomic file writes, shared by checkpoints and dataset downloads.

The bytes go to a temporary file in the target's directory, are flushed and fsync'ed, and only
then renamed over the target (`os.replace`, atomic on POSIX and Windows). A crash or an exception
mid-write leaves any earlier file under that name as it was, and no temporary behind.
"""
import os
import uuid


def atomic_write(path, write):
    """Create or replace `path` with what `write(file)` writes to a binary file object."""
    directory, name = os.path.split(os.path.abspath(os.fspath(path)))
    temporary = os.path.join(directory, f".{name}.{uuid.uuid4().hex[:12]}.tmp")
    # os.open with mode 0o666 lets the umask decide permissions, like a plain open() would.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                         | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(descriptor, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    _sync_directory(directory)


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
