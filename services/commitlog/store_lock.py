"""The store's ``lock`` file: one writer per store directory (an exclusive flock)."""

import fcntl
import os
from pathlib import Path

from rmqstore.errors import StoreLockedError


class StoreLock:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise StoreLockedError(
                f"store {path.parent} is locked by another writer ({path})"
            ) from None
        os.pwrite(self.fd, b"lock", 0)
        os.fsync(self.fd)

    def release(self) -> None:
        if self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1
