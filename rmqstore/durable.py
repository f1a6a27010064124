"""Small files replaced atomically and durably (progress records, snapshots, checkpoint).

``replace_file`` writes a temporary file beside the target, syncs it, renames it over the
target and syncs the directory, so a crash leaves either the old or the new content. A write
that cannot be completed (a full disk, a file size limit) raises ``OSError`` and leaves the
old file in place, never a truncated one.
"""

import errno
import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (created, renamed, deleted files) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """``os.write`` until every byte is written: it may write fewer than asked (a nearly
    full disk) and say so only by what it returns."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.ENOSPC, f"wrote 0 of the last {len(view)} bytes")
        view = view[n:]


def replace_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        tmp.unlink(missing_ok=True)  # the old file stays as it was
        raise
    os.replace(tmp, path)
    fsync_dir(path.parent)
