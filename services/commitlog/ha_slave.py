"""A slave's HA client: follows a master (ours or RocketMQ 4.9's) over RocketMQ's HA protocol.

One thread connects to the master's HA port, reports this store's end at once (RocketMQ's
own slave waits ~5 s), then takes every transfer frame in at its end (``ReplicaLog``; the
frames that arrived together are checked and written together) and reports after them the
end of the whole records in its segment files: the report is the
acknowledgement, sent once the bytes are in the files (before they are flushed), as RocketMQ's
slave does. It also reports every
5 s without frames, drops a master it heard nothing from for 20 s, and reconnects after the
retry interval whenever a connection ends:

* a frame that does not start at this store's end: the stream is out of step; reconnecting
  makes the next first report this store's end again (RocketMQ's rule);
* a record that does not continue this store's history (``Diverged``; checked before it is
  written, so a first frame from another history appends nothing): one log line says why
  and what to do, and the slave retries later.
"""

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from rmqstore.errors import StoreError
from rmqstore.formats import ha
from rmqstore.metrics_http import on_scrape
from services.commitlog.config import master_address
from services.commitlog.engine import CommitLogEngine
from services.commitlog.replica_log import Diverged, ReplicaLog

log = logging.getLogger(__name__)
RECV_BYTES = 256 * 1024
POLL_S = 0.5  # at most this long between looks at the stop flag


class OutOfStep(Exception):
    """A frame that does not start at this store's end."""


class HaSlave:
    """Follow ``engine.config.ha_master`` until ``close``."""

    def __init__(self, engine: CommitLogEngine, heartbeat_s: float = ha.HEARTBEAT_INTERVAL_S
                 ) -> None:  # fmt: skip
        cfg = engine.config
        self.master = cfg.ha_master
        self.host, self.port = master_address(cfg.ha_master)
        self.retry_s = cfg.ha_retry_s
        self.idle_s = cfg.ha_idle_s
        self.heartbeat_s = heartbeat_s
        self.replica = ReplicaLog(engine)
        self.connected = False
        self.connections = 0
        self.frames = 0
        self.last_error = ""
        self.diverged = ""  # why the master's bytes were last refused ("" once it is over)
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="ha-slave", daemon=True)
        # asked before each connection: why not to follow the master now ("": follow)
        self.check: Callable[[], str] | None = None

    @property
    def written(self) -> int:
        """The end of the whole records in this store's files (what it reports)."""
        return self.replica.written

    def start(self) -> None:
        log.info("slave of %s: following its commitlog from offset %d", self.master,
                 self.replica.written)  # fmt: skip
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            if self._sock is not None:
                with contextlib.suppress(OSError):  # closed already
                    self._sock.shutdown(socket.SHUT_RDWR)
        if self._thread.is_alive():
            self._thread.join(10)

    # -- the connection loop -----------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            if self.check is not None and (why := self.check()):
                self._failed(why, logging.ERROR)
                self._stop.wait(self.retry_s)
                continue
            try:
                sock = socket.create_connection((self.host, self.port), timeout=self.retry_s)
                # 8-byte reports: without it, Nagle holds a report until the master's
                # delayed ACK (~40 ms) of the previous one, while its sync puts wait for it
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError as e:
                self._failed(f"cannot connect to the master {self.master}: {e}")
            else:
                with self._lock:
                    self._sock = sock
                try:
                    self._session(sock)
                except Diverged as e:
                    self.diverged = str(e)
                    self._failed(
                        f"refusing the master {self.master}: {e}; nothing was appended. This "
                        "store is not a copy of that master's commitlog (a master wiped or "
                        "replaced?): point --ha-master at the right master, or move this "
                        "store's commitlog aside to follow this master from scratch",
                        logging.ERROR,
                    )  # fmt: skip
                except (OSError, OutOfStep, ValueError) as e:
                    if not self._stop.is_set():
                        self._failed(f"connection to the master {self.master} ended: {e}")
                except StoreError as e:  # e.g. a full disk: this store cannot take the bytes
                    self._failed(f"cannot store what the master {self.master} sent: {e}",
                                 logging.ERROR)  # fmt: skip
                except Exception as e:  # a bug in us: say so, keep following
                    log.exception("following the master %s failed", self.master)
                    self.last_error = f"following the master failed: {e!r}"
                finally:
                    with self._lock:
                        self._sock = None
                    sock.close()
                    self.connected = False
            self._stop.wait(self.retry_s)

    def _failed(self, why: str, level: int = logging.WARNING) -> None:
        """Log a reason once, not at every retry."""
        if why != self.last_error:
            log.log(level, "%s; retrying every %g s", why, self.retry_s)
        self.last_error = why

    def _session(self, sock: socket.socket) -> None:
        replica = self.replica
        report = replica.restart()
        sock.sendall(ha.encode_report(report))  # at once: RocketMQ's slave waits 5 s
        self.connected = True
        self.connections += 1
        log.info("connected to the master %s, reported offset %d", self.master, report)
        buf = bytearray()
        last_read = last_sent = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            wait = min(last_sent + self.heartbeat_s, last_read + self.idle_s) - now
            sock.settimeout(max(min(wait, POLL_S), 0.001))
            try:
                chunk = sock.recv(RECV_BYTES)
            except TimeoutError:
                chunk = None
            now = time.monotonic()
            if chunk == b"":
                raise ConnectionError("the master closed the connection")
            if chunk:
                last_read = now
                buf += chunk
                pos, taken = 0, 0
                while len(buf) - pos >= ha.FRAME_HEADER_SIZE:
                    header = ha.decode_frame_header(buf, pos)
                    body_at = pos + ha.FRAME_HEADER_SIZE
                    if len(buf) - body_at < header.size:
                        break
                    with memoryview(buf) as view:
                        taken += self._frame(header, view[body_at : body_at + header.size])
                    pos = body_at + header.size
                del buf[:pos]
                if taken:  # the frames that came together are checked and written together
                    replica.flush()
                    self.frames += taken
                    self.diverged = ""
                    sock.sendall(ha.encode_report(replica.written))
                    last_sent = now
            elif now - last_read >= self.idle_s:
                raise TimeoutError(f"the master sent nothing for {self.idle_s:g} s")
            if now - last_sent >= self.heartbeat_s:
                sock.sendall(ha.encode_report(replica.written))
                last_sent = now

    def _frame(self, header: ha.FrameHeader, body: memoryview) -> bool:
        """Take one frame in; whether it carried bytes (a heartbeat carries none)."""
        replica = self.replica
        if header.offset != replica.received and not replica.empty:
            raise OutOfStep(f"the master sent offset {header.offset}, this store ends at "
                            f"{replica.received}")  # fmt: skip
        if header.is_heartbeat:
            return False
        if replica.empty:
            log.info("empty store: starting the commitlog at the master's offset %d",
                     header.offset)  # fmt: skip
            if header.offset % replica.file_size:
                log.warning(
                    "the master started this empty store at %d, inside a commitlog file: the "
                    "file's first %d bytes stay zeros, and a restart's recovery reads them as "
                    "the end of the data (a RocketMQ master starts an empty slave at a file "
                    "start)", header.offset, header.offset % replica.file_size,
                )  # fmt: skip
        replica.take(header.offset, body)
        return True


def watch(registry: CollectorRegistry, slave: HaSlave) -> None:
    """The slave's Prometheus metrics, read from it at each scrape."""
    on_scrape(registry, lambda: refresh())  # before the metrics it fills
    connected = Gauge("rmqstore_ha_slave_connected",
                      "1 while this slave is connected to its master.", registry=registry)
    offset = Gauge("rmqstore_ha_slave_offset_bytes", "End of the whole records this slave "
                   "holds: what it reports to its master.", registry=registry)  # fmt: skip
    pending = Gauge("rmqstore_ha_slave_pending_bytes", "Bytes of a record received in part, "
                    "waiting for the rest.", registry=registry)  # fmt: skip
    diverged = Gauge("rmqstore_ha_slave_diverged", "1 while the master's bytes are refused "
                     "as another history (see the log).", registry=registry)  # fmt: skip
    frames = Counter("rmqstore_ha_slave_frames_total", "Transfer frames with bytes taken in.",
                     registry=registry)  # fmt: skip
    connections = Counter("rmqstore_ha_slave_connections_total", "Connections made to the "
                          "master.", registry=registry)  # fmt: skip
    seen = {"frames": 0, "connections": 0}

    def refresh() -> None:
        connected.set(1 if slave.connected else 0)
        offset.set(slave.written)
        pending.set(len(slave.replica.pending))
        diverged.set(1 if slave.diverged else 0)
        for name, counter, now in (("frames", frames, slave.frames),
                                   ("connections", connections, slave.connections)):
            counter.inc(now - seen[name])
            seen[name] = now
