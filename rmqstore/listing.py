"""A directory's file names, listed again only when the directory has changed.

A listing stands while the directory's inode and modification time are those it was made
with, and it was made at least ``SETTLE_NS`` after that modification time: timestamps are
coarse, so a change in the same tick as an earlier one may not move them. A file added,
renamed over or removed changes the directory; a directory swapped for another (as a rebuild
swaps its output in) changes the inode. A file written in place changes neither, so callers
that map files must see such writes through the mapping.
"""

import os
import time

SETTLE_NS = 1_000_000_000  # a listing is trusted once made this long after a change


class Listing:
    """``refresh()`` brings ``names`` up to date: the directory's entries, None if it is
    missing (or not a directory)."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        self.names: list[str] | None = None
        self._stamp: tuple[int, int] | None = None  # (inode, mtime) when listed
        self._listed_ns = 0

    def refresh(self) -> bool:
        """One ``stat`` while nothing changed; True when the directory was listed again."""
        try:
            st = os.stat(self.dir)
        except (FileNotFoundError, NotADirectoryError):
            changed = self._stamp is not None or self.names is not None
            self._stamp, self.names = None, None
            return changed
        if (st.st_ino, st.st_mtime_ns) == self._stamp \
                and self._listed_ns - st.st_mtime_ns > SETTLE_NS:
            return False
        stamp: tuple[int, int] | None = (st.st_ino, st.st_mtime_ns)
        listed_ns = time.time_ns()
        try:
            names: list[str] | None = os.listdir(self.dir)
        except (FileNotFoundError, NotADirectoryError):
            stamp, names = None, None  # gone since the stat
        self._stamp, self._listed_ns, self.names = stamp, listed_ns, names
        return True
