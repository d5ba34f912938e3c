"""The atomic writer behind mg.save, downloads and viz.render: kill -9 mid-save leaves litter
that the next save removes, permissions behave as open(path, "w") would, symlinks are replaced,
never followed."""
import contextlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

import minigrad as mg
from minigrad import atomic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _temporaries(folder):
    return sorted(name for name in os.listdir(folder) if name.endswith(".tmp"))


def _env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))


SAVER = """
import sys
import numpy as np
import minigrad as mg
big = {"x": np.ones(96 << 20, np.uint8)}          # 96 MiB: a save takes a while
print("ready", flush=True)
while True:
    mg.save(big, sys.argv[1])
"""


def _partial_write(folder, pid):
    """Whether `folder` holds a temporary of process `pid` with some bytes written."""
    for name in _temporaries(folder):
        if f"~{pid}~" in name:
            with contextlib.suppress(FileNotFoundError):    # renamed meanwhile
                return os.path.getsize(os.path.join(folder, name)) > 0
    return False


def _kill_mid_save(folder, target):
    """Start a process saving `target` in a loop and kill -9 it while a temporary with bytes
    in it exists. Returns the killed (not yet reaped) process. Whether the kill landed mid-write
    is checked after it (a temporary only grows until it is renamed), so timing cannot fail
    the caller: a kill that came between two writes is retried."""
    for _ in range(20):
        child = subprocess.Popen([sys.executable, "-c", SAVER, str(target)], env=_env(),
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _partial_write(folder, child.pid):
            time.sleep(0.002)
        child.send_signal(signal.SIGKILL)
        child.stdout.close()
        _wait_until_dead(child)
        if _partial_write(folder, child.pid):
            return child
        child.wait()     # the kill came after a rename or before the first byte: try again
    pytest.fail("never caught the saver mid-write")


def _wait_until_dead(child, timeout=10):
    """Wait until the killed child is a zombie (dead, not reaped) or gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child.pid}/stat") as file:
                if file.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except FileNotFoundError:
            return
        time.sleep(0.01)
    pytest.fail(f"process {child.pid} did not die")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and SIGKILL")
@pytest.mark.parametrize("reaped", [True, False], ids=["reaped", "zombie"])
def test_kill_9_mid_save_leaves_the_old_file_and_the_next_save_cleans_up(tmp_path, reaped):
    target = tmp_path / "model.npz"
    mg.save({"x": np.arange(5)}, target)
    child = _kill_mid_save(tmp_path, target)
    try:
        if reaped:
            child.wait(timeout=10)
        else:
            _wait_until_dead(child)
        litter = _temporaries(tmp_path)
        assert len(litter) == 1 and f"~{socket.gethostname()}~{child.pid}~" in litter[0]
        assert os.path.getsize(tmp_path / litter[0]) > 0
        loaded = mg.load(target)            # whatever the killed saver managed: a whole file
        assert loaded["x"].shape in ((5,), (96 << 20,))
        mg.save({"y": np.ones(2)}, tmp_path / "other.safetensors")     # same folder
        assert _temporaries(tmp_path) == []
    finally:
        child.kill()
        child.wait(timeout=10)


def test_temporaries_of_live_writers_and_other_hosts_are_kept(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        host = atomic._host()
        names = {
            "live": f".a.npz~{host}~{sleeper.pid}~0123456789ab.tmp",
            "self": f".b.npz~{host}~{os.getpid()}~0123456789ab.tmp",
            "other host": f".c.npz~elsewhere.example~{gone.pid}~0123456789ab.tmp",
            "not ours": ".d.npz.tmp",
            "dead": f".e.npz~{host}~{gone.pid}~0123456789ab.tmp",
        }
        for name in names.values():
            (tmp_path / name).write_bytes(b"partial")
        mg.save({"x": np.ones(1)}, tmp_path / "model.npz")
        left = set(os.listdir(tmp_path))
        assert left == {"model.npz"} | {n for k, n in names.items() if k != "dead"}
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o755, 0o444 if os.geteuid() == 0 else 0o644])
def test_replacing_a_file_keeps_its_mode(tmp_path, mode):
    path = tmp_path / "model.safetensors"
    mg.save({"x": np.ones(1)}, path)
    os.chmod(path, mode)
    mg.save({"x": np.zeros(3)}, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == mode
    np.testing.assert_array_equal(mg.load(path)["x"], np.zeros(3))


def test_a_new_file_gets_the_mode_open_would_give(tmp_path):
    old = os.umask(0o027)
    try:
        with open(tmp_path / "by-open", "w"):
            pass
        mg.save({"x": np.ones(1)}, tmp_path / "by-save.npz")
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "by-save.npz").st_mode == os.stat(tmp_path / "by-open").st_mode


def test_a_symlink_at_the_name_is_replaced_not_followed(tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("do not overwrite")
    link = tmp_path / "model.npz"
    link.symlink_to(precious)
    mg.save({"x": np.ones(2)}, link)
    assert precious.read_text() == "do not overwrite"
    assert not link.is_symlink() and mg.load(link)["x"].shape == (2,)


@contextlib.contextmanager
def _unprivileged():
    """Run the block as a user without special rights: as root, with the effective user and
    group switched to nobody (root bypasses permission bits, so only then do they count)."""
    if os.geteuid() != 0:
        yield
        return
    try:
        os.setegid(65534)
        os.seteuid(65534)
    except OSError as error:
        os.setegid(0)
        pytest.skip(f"cannot drop root rights to test permissions: {error}")
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


@pytest.fixture
def shared_folder():
    """A folder anyone may write in, outside pytest's root-only tmp_path."""
    folder = tempfile.mkdtemp(prefix="minigrad-perm-")
    os.chmod(folder, 0o777)
    yield folder
    shutil.rmtree(folder)


def _open_error(path, mode):
    try:
        with open(path, mode):
            return None
    except OSError as error:
        return error


def test_saving_over_a_read_only_file_is_a_permission_error(shared_folder):
    path = os.path.join(shared_folder, "model.npz")
    mg.save({"x": np.ones(2)}, path)
    os.chmod(path, 0o444)
    before = open(path, "rb").read()
    with _unprivileged():
        assert isinstance(_open_error(path, "r+b"), PermissionError)   # what open() says
        with pytest.raises(PermissionError) as info:
            mg.save({"x": np.zeros(2)}, path)
    assert info.value.filename == path and ".tmp" not in str(info.value)
    assert open(path, "rb").read() == before
    assert os.listdir(shared_folder) == ["model.npz"]


def test_saving_into_a_read_only_folder_names_the_users_path(shared_folder):
    os.chmod(shared_folder, 0o555)
    path = os.path.join(shared_folder, "model.npz")
    with _unprivileged():
        assert isinstance(_open_error(path, "wb"), PermissionError)
        with pytest.raises(PermissionError) as info:
            mg.save({"x": np.zeros(2)}, path)
    os.chmod(shared_folder, 0o777)
    assert info.value.filename == path and ".tmp" not in str(info.value)
    assert os.listdir(shared_folder) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may write a 0444 file")
def test_as_root_a_read_only_file_is_written_as_open_would(shared_folder):
    path = os.path.join(shared_folder, "model.npz")
    mg.save({"x": np.ones(2)}, path)
    os.chmod(path, 0o444)
    assert _open_error(path, "r+b") is None      # root's open() succeeds, so save does too
    mg.save({"x": np.zeros(2)}, path)
    np.testing.assert_array_equal(mg.load(path)["x"], np.zeros(2))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o444


def test_an_error_while_writing_names_the_users_path(tmp_path):
    def disk_full(file):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError) as info:
        atomic.atomic_write(tmp_path / "big.bin", disk_full)
    assert info.value.errno == 28 and info.value.filename == str(tmp_path / "big.bin")
    assert os.listdir(tmp_path) == []
