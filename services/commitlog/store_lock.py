"""The store's ``lock`` file: one writer per store directory, rmqstore's or RocketMQ's.

Two locks on the same file, both exclusive and both taken without waiting:

* ``flock`` (what rmqstore always took), and
* a POSIX record lock over the whole file (``fcntl(F_SETLK)``), the lock RocketMQ 4.9 takes
  with ``FileChannel.tryLock``.

On Linux the two kinds do not see each other, so holding both keeps out a second rmqstore
writer and a RocketMQ broker alike, and a broker running on the store keeps rmqstore out.
"""

import fcntl
import os
from pathlib import Path

from rmqstore.errors import StoreLockedError


def _refused(path: Path, by: str) -> StoreLockedError:
    return StoreLockedError(f"store {path.parent} is locked by another writer ({path}, {by})")


class StoreLock:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise _refused(path, "flock held: an rmqstore writer") from None
        try:
            fcntl.lockf(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # EACCES or EAGAIN: a record lock, e.g. RocketMQ's
            os.close(self.fd)  # drops our flock too
            raise _refused(path, "POSIX record lock held: a RocketMQ broker?") from None
        os.pwrite(self.fd, b"lock", 0)
        os.fsync(self.fd)

    def release(self) -> None:
        if self.fd >= 0:
            fcntl.lockf(self.fd, fcntl.LOCK_UN)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


class ReadLock:
    """A read-only server's shared hold on an existing ``lock`` (never creates or writes it):
    refused while a writer (rmqstore's or RocketMQ's) holds the store, and keeps one from
    starting while it is held. No ``lock`` file: nothing to hold."""

    def __init__(self, path: Path) -> None:
        self.fd = -1
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise _refused(path, "a writer holds it; --read-only cannot serve it meanwhile") \
                from None
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
