"""Downloading a file from a list of mirrors, and checking files against their checksums.

A download streams into a temporary file in the target folder (see `minigrad.atomic`) while it
is counted and hashed, and is moved into place only once verified, so a reader never sees a
half-written or unverified file. Memory stays bounded whatever a mirror sends: a body larger
than the file can be, or a gzip stream that inflates past the known size (a "gzip bomb"), is cut
off as soon as it crosses the limit. A mirror that cannot be reached or serves bytes whose
checksum does not match is skipped and the next one is tried.
"""
import hashlib
import http.client
import pathlib
import sys
import urllib.request
import zlib

from ..atomic import atomic_write
from .idx import GZIP_MAGIC

TIMEOUT = 10.0       # seconds per network operation: an unreachable mirror fails fast
CHUNK = 1 << 20      # bytes read from the network (and inflated) at a time


class DownloadError(RuntimeError):
    """No mirror served a verified copy of a file; the message lists what each mirror did."""


class ChecksumError(ValueError):
    """Bytes (downloaded or found in the data folder) are not the expected file."""


class _MirrorFailed(Exception):
    """The network side of one mirror failed (unreachable, HTTP error, cut off)."""


def fetch(url, timeout=TIMEOUT):
    """The bytes at `url`, as an iterable of chunks (the one function that touches the network;
    tests replace it)."""
    request = urllib.request.Request(url, headers={"User-Agent": "minigrad"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        while chunk := response.read(CHUNK):
            yield chunk


class Verifier:
    """Counts and hashes a file fed in chunks, gzipped or not: the md5 of the bytes as given and
    the sha256 of their content (inflated when they start with the gzip magic). More than
    `size` bytes of content, or more than the gzip of `size` bytes can take, is a ChecksumError
    at once, after at most one chunk of work. With `keep`, the content is kept in `parts`."""

    def __init__(self, size, name, keep=False):
        self.size, self.name = size, name
        self.limit = size + size // 1000 + 1024     # gzip's worst case: stored blocks
        self.given = self.content_size = 0
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.sha256 = hashlib.sha256()
        self.inflater = self.gzipped = None
        self.parts = [] if keep else None

    def update(self, chunk):
        self.given += len(chunk)
        if self.given > self.limit:
            raise ChecksumError(f"{self.name}: more than {self.limit} bytes; the file is "
                                f"{self.size} bytes uncompressed")
        self.md5.update(chunk)
        if self.gzipped is None:
            self.gzipped = chunk[:2] == GZIP_MAGIC
        if not self.gzipped:
            self._content(chunk)
            return
        while chunk:
            if self.inflater is None or self.inflater.eof:   # (concatenated gzip members)
                self.inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
            try:
                data = self.inflater.decompress(chunk, CHUNK)
            except zlib.error as error:
                raise ChecksumError(f"{self.name}: corrupt gzip stream ({error})") from None
            self._content(data)
            chunk = self.inflater.unused_data if self.inflater.eof else \
                self.inflater.unconsumed_tail

    def _content(self, data):
        self.content_size += len(data)
        if self.content_size > self.size:
            raise ChecksumError(f"{self.name}: inflates to more than the {self.size} bytes the "
                                "file has: not the expected file")
        self.sha256.update(data)
        if self.parts is not None:
            self.parts.append(data)

    def check(self, md5=None, raw_sha256=None):
        """Pass when the md5 of the bytes is the canonical `md5`, or the content has the known
        size and sha256 (which also accepts a copy compressed with other gzip settings, or none);
        raise ChecksumError otherwise."""
        found_md5 = self.md5.hexdigest()
        if md5 is not None and found_md5 == md5:
            return
        complete = self.inflater is None or self.inflater.eof
        found = self.sha256.hexdigest() if complete else "unreadable (truncated gzip stream)"
        if raw_sha256 is not None and found == raw_sha256 and self.content_size == self.size:
            return
        raise ChecksumError(f"{self.name}: checksum mismatch: expected md5 {md5} or content "
                            f"sha256 {raw_sha256} ({self.size} bytes), found md5 {found_md5} and "
                            f"content sha256 {found} ({self.content_size} bytes)")


def download(name, folder, mirrors, size, md5=None, raw_sha256=None):
    """Download `name` from the first of `mirrors` (URL prefixes) that serves a verified copy
    (`size`: bytes of the uncompressed content; checksums as in `Verifier.check`), write it
    atomically to `folder/name` and return that path. Raises DownloadError listing every
    mirror's failure when none succeeds; creates `folder` only to keep a verified file."""
    folder = pathlib.Path(folder)
    path = folder / name
    created = [f for f in (folder, *folder.parents) if not f.exists()]   # innermost first
    failures = []
    for mirror in mirrors:
        url = mirror + name
        print(f"minigrad: downloading {url}", file=sys.stderr)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write(path, lambda file, url=url: _stream(url, file, Verifier(size, name),
                                                             md5, raw_sha256))
        except (_MirrorFailed, ChecksumError) as error:
            failures.append(f"  {url}: {error}")
            continue
        except OSError as error:
            raise DownloadError(f"could not write {path} (downloading {url}): {error}") from error
        return path
    for empty in created:   # leave no folder behind that only the failed download made
        try:
            empty.rmdir()
        except OSError:
            break
    raise DownloadError(f"no mirror served a verified copy of {name}:\n" + "\n".join(failures))


def _stream(url, file, verifier, md5, raw_sha256):
    """Copy the body at `url` into `file` through `verifier`; network failures are the mirror's,
    write failures (OSError from `file`) the caller's."""
    chunks = None
    try:
        while True:
            try:
                chunks = iter(fetch(url)) if chunks is None else chunks
                chunk = next(chunks, None)
            except (OSError, http.client.HTTPException) as error:   # URLError is an OSError
                raise _MirrorFailed(str(error) or type(error).__name__) from error
            if chunk is None:
                break
            verifier.update(chunk)
            file.write(chunk)
    finally:
        getattr(chunks, "close", lambda: None)()    # a generator: close its connection now
    verifier.check(md5, raw_sha256)
