"""Fixed-size, fully preallocated files mapped read-write (consume-queue segments, index files)."""

import errno
import mmap
import os
from pathlib import Path

from rmqstore.errors import DiskFullError, StoreError

TMP_SUFFIX = ".tmp"  # a file being allocated; never a valid segment or index file name


class FileSizeError(StoreError):
    """A store file whose size does not match the configured layout."""

    grpc_status = "FAILED_PRECONDITION"


def sync_file(path: Path) -> None:
    """fdatasync a mapped file by path. Linux writes back pages dirtied through a shared
    mapping; unlike mmap.flush this releases the GIL, and no fd is kept per file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


class MappedFile:
    """One file mapped in full. ``mm`` is the writable map; ``close`` unmaps it."""

    def __init__(self, path: Path, mm: mmap.mmap, created: bool) -> None:
        self.path = path
        self.mm = mm
        self.created = created
        self.dirty = created

    @classmethod
    def create(cls, path: Path, size: int) -> "MappedFile":
        """Create ``path`` with ``size`` bytes allocated on disk.

        The file is allocated under a temporary name and linked into place, so a crash never
        leaves a short file under a real name; an existing ``path`` is never replaced.
        """
        tmp = path.with_name(path.name + TMP_SUFFIX)
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as e:
                if e.errno == errno.ENOSPC:
                    raise DiskFullError(f"no room for {path} ({size} bytes)") from e
                if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                os.ftruncate(fd, size)
            os.link(tmp, path)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        try:
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
            tmp.unlink(missing_ok=True)
        return cls(path, mm, created=True)

    @classmethod
    def open(cls, path: Path, size: int) -> "MappedFile":
        """Map an existing file that must be exactly ``size`` bytes."""
        fd = os.open(path, os.O_RDWR)
        try:
            actual = os.fstat(fd).st_size
            if actual != size:
                raise FileSizeError(
                    f"{path} holds {actual} bytes, the configured layout needs {size}"
                )
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(path, mm, created=False)

    def flush(self) -> None:
        if self.take_dirty():
            sync_file(self.path)

    def take_dirty(self) -> bool:
        """Whether the file was written since the last call (which clears the mark)."""
        dirty, self.dirty = self.dirty, False
        return dirty

    def close(self) -> None:
        """Unmap (callers must drop their numpy views first)."""
        if not self.mm.closed:
            self.mm.close()
