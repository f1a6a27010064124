"""Files mapped read-only and cached by path while writers change them (the query service's
readers, the remoting broker's pulls).

A file is mapped once and its mapping reused while the same file (inode) of the same size is
there; a file replaced under its name (a rebuilt one) or grown is mapped again. A file that is
missing or shorter than ``min_size`` (still being created) reads as None.
"""

import contextlib
import mmap
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Generic, TypeVar

from rmqstore.listing import Listing
from rmqstore.segments import parse_segment_name

T = TypeVar("T")


FilePath = str | Path  # one MappedFiles is asked with one kind (a str and a Path differ as keys)


class MappedFiles(Generic[T]):
    """``get(path)`` gives ``view(path, map)`` of the file's current mapping, or None."""

    def __init__(self, view: Callable[[FilePath, mmap.mmap], T], min_size: int = 1) -> None:
        self._view = view
        self._min_size = min_size
        self._lock = threading.Lock()
        self._maps: dict[FilePath, tuple[int, mmap.mmap, T]] = {}  # inode, map, view

    def get(self, path: FilePath) -> T | None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        with self._lock:
            hit = self._maps.get(path)
            if hit is not None and hit[0] == st.st_ino and len(hit[1]) == st.st_size:
                return hit[2]
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                return None
            try:
                st = os.fstat(fd)
                if st.st_size < self._min_size:
                    return None
                mm = mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)
            try:
                view = self._view(path, mm)
            except BaseException:
                mm.close()
                raise
            self._maps[path] = (st.st_ino, mm, view)
            return view

    def forget(self, gone: Iterable[FilePath]) -> None:
        """Drop the mappings of these files (a query still using one keeps it)."""
        with self._lock:
            for path in gone:
                self._maps.pop(path, None)

    def forget_except(self, present: Iterable[FilePath]) -> None:
        """Drop the mappings of files no longer there (a query still using one keeps it)."""
        keep = set(present)
        with self._lock:
            for path in [p for p in self._maps if p not in keep]:
                del self._maps[path]

    def close(self) -> None:
        with self._lock:
            for _, mm, _ in self._maps.values():
                with contextlib.suppress(BufferError):  # a query still holds a view
                    mm.close()
            self._maps.clear()


def map_listed_segments(
    files: MappedFiles[T], listing: Listing, before: Iterable[str]
) -> tuple[list[tuple[int, T]], list[str], bool]:
    """The segment files ``listing`` names (each by its start offset), in start order, mapped
    through ``files``: ((start, mapping) of each one mapped, the path of each one listed,
    whether every one was mapped). The mappings of ``before``'s files no longer listed are
    dropped."""
    named = sorted((start, name) for name in listing.names or ()
                   if (start := parse_segment_name(name)) is not None)  # fmt: skip
    paths = [os.path.join(listing.dir, name) for _, name in named]
    files.forget(set(before) - set(paths))
    mapped, complete = [], True
    for (start, _), path in zip(named, paths, strict=True):
        view = files.get(path)
        if view is None:  # vanished, or too short yet
            complete = False
        else:
            mapped.append((start, view))
    return mapped, paths, complete
