"""Map the pages ahead of the write position before the append lock needs them.

The first write to each page of a fresh segment mapping costs a page fault, all of it inside
the append lock and under the GIL. A
background thread asks the kernel to populate the next ``window`` bytes with
``madvise(MADV_POPULATE_READ)`` (Linux 5.14+) called through ctypes, which releases the GIL,
so the page cache pages are allocated and mapped on the other core while the writer keeps
appending; its first write to a page is then a cheap write-enable fault (measured here: 1.5-4
µs per 1 KiB record cold, 0.3-0.4 populated). READ, not WRITE: populating for writing would
dirty the pages, and every flush would write the zeros ahead of the data to disk. Where the
call is not supported the thread stops after the first attempt and writes fault as before.
"""

import ctypes
import errno
import logging
import threading
from collections.abc import Callable

from services.commitlog.segment_files import PAGE, Segment

log = logging.getLogger(__name__)
MADV_POPULATE_READ = 22  # linux/mman.h; not exported by Python's mmap module before 3.13
CHUNK = 1 << 20  # one call populates at most this much, so close() never waits long
DEFAULT_WINDOW = 32 << 20


def _libc_madvise() -> Callable[[int, int, int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


class Prefaulter:
    """Keeps ``[wrote, wrote + window)`` of the head segment populated."""

    def __init__(self, head: Callable[[], Segment | None], window: int = DEFAULT_WINDOW) -> None:
        self._head = head
        self.window = window
        self._madvise = _libc_madvise()
        self._wake = threading.Event()
        self._stop = False
        self.populated_bytes = 0
        self.wakes = 0  # pokes that woke the thread
        self.off_reason = ""  # why the thread stopped early (the kernel lacks the call)
        self._thread = threading.Thread(target=self._run, name="commitlog-prefault", daemon=True)

    @property
    def supported(self) -> bool:
        return self._madvise is not None

    def start(self) -> None:
        if self.supported and self.window > 0:
            self._thread.start()

    def poke(self) -> None:
        """The write position moved (called after each append). The thread is woken only
        once less than half the window is left populated: waking it for every batch cost a
        thread switch and a GIL hand-off per put (and it runs every 50 ms anyway)."""
        seg = self._head()
        if seg is not None and seg.populated >= min(seg.wrote + self.window // 2, seg.size):
            return
        self.wakes += 1
        self._wake.set()

    def stop(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(0.05)
            self._wake.clear()
            seg = self._head()
            if seg is None:
                continue
            try:
                self._populate(seg)
            except OSError as e:
                log.info("page pre-faulting is off: %s", e)
                self.off_reason = str(e)
                return

    def _populate(self, seg: Segment) -> None:
        madvise = self._madvise
        assert madvise is not None  # the thread runs only when supported
        ahead = seg.wrote + self.window
        target = min(ahead - ahead % PAGE, seg.size)  # madvise wants page-aligned ranges
        while not self._stop:
            wrote = seg.wrote  # the writer moves on meanwhile: never populate behind it
            start = max(seg.populated, wrote - wrote % PAGE)
            if start >= target:
                return
            length = min(CHUNK, target - start)
            with seg.lock:
                if seg.closed:
                    return
                rc = madvise(seg.address + start, length, MADV_POPULATE_READ)
            if rc != 0:
                err = ctypes.get_errno()
                if err in (errno.EINVAL, errno.ENOSYS, errno.EPERM):
                    raise OSError(err, "madvise(MADV_POPULATE_READ) is not supported here")
                log.warning("pre-faulting %s failed: errno %d", seg.path.name, err)
                return
            seg.populated = start + length
            self.populated_bytes += length
