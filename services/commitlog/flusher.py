"""Flushing: periodic (async) or group commit (sync: one msync serves every waiting put).

Every ``snapshot_interval`` it also persists the checkpoint file and the queue-table snapshot.
"""

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Flusher:
    def __init__(
        self,
        flush: Callable[[], int],
        housekeeping: Callable[[], None],
        sync: bool,
        interval_s: float,
        snapshot_interval_s: float = 10.0,
    ) -> None:
        self._flush = flush
        self._housekeeping = housekeeping
        self.sync = sync
        self.interval = interval_s
        self.snapshot_interval = snapshot_interval_s
        self.flushed = 0
        self._requested = 0
        self._cond = threading.Condition()
        self._stop = False
        self._waiters: list[tuple[int, Callable[[bool], None]]] = []  # see on_durable
        self.last_flush_seconds = 0.0
        self.flushes = 0
        self.housekeepings = 0
        self._thread = threading.Thread(target=self._run, name="commitlog-flush", daemon=True)

    def start(self, flushed: int) -> None:
        self.flushed = flushed
        self._thread.start()

    def wait_durable(self, offset: int, timeout: float = 5.0) -> bool:
        """Block until ``offset`` is flushed (sync mode); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            if offset > self._requested:
                self._requested = offset
                self._cond.notify_all()
            while self.flushed < offset:
                left = deadline - time.monotonic()
                if left <= 0 or self._stop:
                    return self.flushed >= offset
                self._cond.wait(left)
        return True

    def on_durable(self, offset: int, done: Callable[[bool], None]) -> None:
        """Call ``done(True)`` once ``offset`` is flushed (now, if it is), or ``done(False)``
        if the flusher stops first (sync mode). Called in the flush thread: keep it short."""
        with self._cond:
            if self.flushed < offset and not self._stop:
                self._waiters.append((offset, done))
                if offset > self._requested:
                    self._requested = offset
                    self._cond.notify_all()
                return
            ok = self.flushed >= offset
        done(ok)

    def _run(self) -> None:
        next_housekeeping = time.monotonic() + self.snapshot_interval
        while True:
            with self._cond:
                if not self._stop:
                    if self.sync:
                        while self._requested <= self.flushed and not self._stop:
                            if not self._cond.wait(self.interval):
                                break
                    else:
                        self._cond.wait(self.interval)
                stopping = self._stop
            try:
                t0 = time.perf_counter()
                done = self._flush()
                self.last_flush_seconds = time.perf_counter() - t0
                self.flushes += 1
            except Exception:  # keep flushing; a failing disk shows in logs and metrics
                log.exception("commitlog flush failed")
                done = self.flushed
            with self._cond:
                self.flushed = max(self.flushed, done)
                self._cond.notify_all()
                waiters, self._waiters = self._waiters, []
                if not stopping:
                    self._waiters = [w for w in waiters if w[0] > self.flushed]
            for offset, call in waiters:
                if stopping or offset <= self.flushed:
                    call(offset <= self.flushed)
            if stopping:
                return
            if time.monotonic() >= next_housekeeping:
                next_housekeeping = time.monotonic() + self.snapshot_interval
                try:
                    self._housekeeping()
                    self.housekeepings += 1
                except Exception:
                    log.exception("checkpoint/snapshot failed")

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()
