"""Downloading a file from a list of mirrors: checksum verification and atomic writes.

A mirror that cannot be reached, or that serves bytes whose checksum does not match, is skipped
and the next one is tried. Accepted bytes are written to a temporary file in the target folder and
moved into place with `os.replace`, so a reader never sees a half-written file, even when two
processes download at once or the download is interrupted.
"""
import hashlib
import http.client
import pathlib
import sys
import urllib.request

from ..atomic import atomic_write
from .idx import IDXError, decompress

TIMEOUT = 10.0  # seconds per network operation: an unreachable mirror fails fast


class DownloadError(RuntimeError):
    """No mirror served a verified copy of a file; the message lists what each mirror did."""


class ChecksumError(ValueError):
    """Downloaded bytes are not the expected file."""


def fetch(url, timeout=TIMEOUT):
    """The bytes at `url` (the one function that touches the network; tests replace it)."""
    request = urllib.request.Request(url, headers={"User-Agent": "minigrad"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


def verify(data, md5=None, raw_sha256=None):
    """Check that `data` is the expected file: either its md5 is the canonical `md5`, or the
    sha256 of its (decompressed) content is `raw_sha256`, which also accepts a copy that was
    compressed again with other gzip settings. Raises ChecksumError otherwise."""
    found_md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
    if md5 is not None and found_md5 == md5:
        return
    try:
        found_sha256 = hashlib.sha256(decompress(data)).hexdigest()
    except IDXError as error:
        found_sha256 = f"unreadable ({error})"
    if raw_sha256 is not None and found_sha256 == raw_sha256:
        return
    raise ChecksumError(f"checksum mismatch: expected md5 {md5} or content sha256 {raw_sha256}, "
                        f"found md5 {found_md5} and content sha256 {found_sha256}")


def write_file(path, data):
    """Write `data` to `path` atomically, creating the folder if needed."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda file: file.write(data))


def download(name, folder, mirrors, md5=None, raw_sha256=None):
    """Download `name` from the first of `mirrors` (URL prefixes) that serves a verified copy,
    write it atomically to `folder/name` and return that path. Raises DownloadError listing
    every mirror's failure when none succeeds."""
    path = pathlib.Path(folder) / name
    failures = []
    for mirror in mirrors:
        url = mirror + name
        print(f"minigrad: downloading {url}", file=sys.stderr)
        try:
            data = fetch(url)
            verify(data, md5, raw_sha256)
        except (OSError, http.client.HTTPException, ValueError) as error:  # URLError is an OSError
            failures.append(f"  {url}: {error}")
            continue
        try:
            write_file(path, data)
        except OSError as error:
            raise DownloadError(f"downloaded {url} but could not write {path}: {error}") from error
        return path
    raise DownloadError(f"no mirror served a verified copy of {name}:\n" + "\n".join(failures))
