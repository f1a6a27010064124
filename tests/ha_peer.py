"""An HA peer written from ``spec/rocketmq-ha.md`` alone: RocketMQ 4.9's slave and master.

Standard library only (socket, struct, threading) and no project module, so that tests
check the writer against the protocol, not against its own code. Both roles speak plain TCP,
big-endian:

- slave → master, an offset report: ``int64`` = the slave's max commit-log offset;
- master → slave, a transfer frame: ``int64 offset | int32 size | size bytes`` (size ≤ 32 KiB,
  never across a commit-log file end; size 0 = a heartbeat carrying the next offset).

``PeerSlave(host, port, first_report=0)`` connects, reports ``first_report`` at once (unless
``report_on_connect=False``), and ``run_until(offset, timeout)`` receives frames, applies each
only at its own end (an empty slave takes any offset), acknowledges each (unless ``acking``
is False) and returns once it holds bytes up to ``offset``; ``follow()`` does the same in a
background thread until ``close()`` (``wait_for(offset, timeout)`` polls it). ``bytes``
holds everything it received from ``start`` on; with ``directory`` and ``file_size`` it also
writes commit-log files named by their start offset (20 digits), as RocketMQ's slave does.

``PeerMaster(commitlog_dir, file_size)`` listens on ``port`` (127.0.0.1, any free port by
default) and serves the files of a commit-log directory to every slave that connects: nothing
before the first report; report 0 starts at the first byte of the last file; any other report
starts exactly there; frames as above; a heartbeat after 5 s without sending. ``max_offset``
is where its data ends (by default found by walking the record headers of the last file
that holds any: a record starts with ``int32 total size | int32 magic``; a blank end-of-file
record has magic 0xCBD43194; a size of 0 ends the data); set it to serve more as files grow.
``acked`` is the highest offset any slave reported; ``first_reports`` each slave's first.
"""

import os
import socket
import struct
import threading
import time

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
MAX_BODY = 32 * 1024
HEARTBEAT_S = 5.0
MAGICS = (0xDAA320A7, 0xDAA320AB)
BLANK_MAGIC = 0xCBD43194


class ProtocolError(Exception):
    """The other side broke the protocol (the peer closes the connection, as RocketMQ's)."""


class PeerSlave:
    def __init__(
        self,
        host: str,
        port: int,
        first_report: int = 0,
        *,
        report_on_connect: bool = True,
        acking: bool = True,
        directory: str | None = None,
        file_size: int | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        self.sock = socket.create_connection((host, port), timeout=connect_timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.first_report = first_report
        self.acking = acking
        self.directory, self.file_size = directory, file_size
        self.start: int | None = None if first_report == 0 else first_report
        self.max_offset = first_report
        self.bytes = bytearray()
        self.frames: list[tuple[int, int]] = []  # (offset, size) of every data frame
        self.heartbeats: list[int] = []  # offsets the heartbeats carried
        self.closed = False  # the master closed the connection
        self._buf = bytearray()
        self._stopping = False
        self._following: threading.Thread | None = None
        if report_on_connect:
            self.report(first_report)

    def report(self, offset: int) -> None:
        self.sock.sendall(REPORT.pack(offset))

    def run_until(self, offset: int, timeout: float) -> None:
        """Receive until this slave holds bytes up to ``offset``; TimeoutError if not by
        ``timeout`` seconds, ConnectionError if the master closes first."""
        deadline = time.monotonic() + timeout
        while self.max_offset < offset:
            if not self._receive(deadline):
                raise ConnectionError(f"the master closed the connection at {self.max_offset}")
            if time.monotonic() > deadline and self.max_offset < offset:
                raise TimeoutError(f"holds up to {self.max_offset}, not {offset}")

    def wait_heartbeat(self, timeout: float) -> int:
        """Receive until a heartbeat comes; the offset it carried."""
        deadline = time.monotonic() + timeout
        seen = len(self.heartbeats)
        while len(self.heartbeats) == seen:
            if not self._receive(deadline):
                raise ConnectionError("the master closed the connection")
            if time.monotonic() > deadline and len(self.heartbeats) == seen:
                raise TimeoutError("no heartbeat")
        return self.heartbeats[seen]

    def follow(self) -> None:
        """Receive (and acknowledge) in a background thread until ``close``; ``wait_for``
        polls what it received meanwhile."""
        self._following = threading.Thread(target=self._follow, daemon=True)
        self._following.start()

    def _follow(self) -> None:
        while not self.closed and not self._stopping:
            try:
                self._receive(time.monotonic() + 0.2)
            except (OSError, ProtocolError):
                return

    def wait_for(self, offset: int, timeout: float) -> bool:
        """While following: whether it holds bytes up to ``offset`` within ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.max_offset < offset and time.monotonic() < deadline and not self.closed:
            time.sleep(0.01)
        return self.max_offset >= offset

    def wait_closed(self, timeout: float) -> bool:
        """Receive (and apply) until the master closes the connection: whether it did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._receive(deadline):
                return True
        return False

    def _receive(self, deadline: float) -> bool:
        """Read once (up to the deadline) and apply whole frames; False at end of file."""
        if self.closed:
            return False
        self.sock.settimeout(max(0.01, min(0.5, deadline - time.monotonic())))
        try:
            data = self.sock.recv(1 << 16)
        except TimeoutError:
            return True
        except OSError:
            data = b""
        if not data:
            self.closed = True
            return False
        self._buf += data
        while len(self._buf) >= HEADER.size:
            offset, size = HEADER.unpack_from(self._buf)
            if size < 0 or size > MAX_BODY:
                raise ProtocolError(f"frame size {size} is outside 0..{MAX_BODY}")
            if len(self._buf) < HEADER.size + size:
                break
            body = bytes(self._buf[HEADER.size : HEADER.size + size])
            del self._buf[: HEADER.size + size]
            self._apply(offset, body)
        return True

    def _apply(self, offset: int, body: bytes) -> None:
        if not body:
            self.heartbeats.append(offset)
            return
        if self.start is None:  # an empty slave takes any offset
            self.start = self.max_offset = offset
        elif offset != self.max_offset:
            raise ProtocolError(f"a frame at {offset}, but this slave ends at {self.max_offset}")
        if self.file_size and (offset % self.file_size) + len(body) > self.file_size:
            raise ProtocolError(f"a frame at {offset} of {len(body)} bytes crosses a file end")
        self.frames.append((offset, len(body)))
        self.bytes += body
        if self.directory and self.file_size:
            self._write_file(offset, body)
        self.max_offset = offset + len(body)
        if self.acking:
            self.report(self.max_offset)

    def _write_file(self, offset: int, body: bytes) -> None:
        assert self.directory is not None and self.file_size is not None
        first = offset - offset % self.file_size
        path = os.path.join(self.directory, f"{first:020d}")
        os.makedirs(self.directory, exist_ok=True)
        mode = "r+b" if os.path.exists(path) else "w+b"
        with open(path, mode) as f:
            if mode == "w+b":
                f.truncate(self.file_size)
            f.seek(offset - first)
            f.write(body)

    def close(self) -> None:
        """Close the connection (as a killed slave's closes)."""
        self._stopping = True
        if self._following is not None:
            self._following.join(5)
        self.sock.close()


class PeerMaster:
    def __init__(
        self,
        commitlog_dir: str,
        file_size: int,
        host: str = "127.0.0.1",
        port: int = 0,
        max_offset: int | None = None,
    ) -> None:
        self.dir, self.file_size = str(commitlog_dir), file_size
        self.max_offset = self._data_end() if max_offset is None else max_offset
        self.acked = 0
        self.first_reports: list[int] = []
        self._listener = socket.create_server((host, port))
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _files(self) -> list[int]:
        return sorted(int(n) for n in os.listdir(self.dir) if n.isdigit())

    def _data_end(self) -> int:
        """Where the data ends: in the last file that holds any (a store may have its next
        file made already, still empty)."""
        for first in reversed(self._files()):
            with open(os.path.join(self.dir, f"{first:020d}"), "rb") as f:
                data = f.read()
            pos = 0
            while pos + 8 <= len(data):
                size, magic = struct.unpack_from(">iI", data, pos)
                if magic == BLANK_MAGIC:
                    return first + self.file_size
                if size <= 0 or magic not in MAGICS:
                    break
                pos += size
            if pos:
                return first + pos
        return 0

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = bytearray()
        try:
            first = None
            conn.settimeout(30.0)  # nothing is sent before the first report
            while first is None:
                data = conn.recv(4096)
                if not data:
                    return
                first = self._take_reports(buf, data)
            self.first_reports.append(first)
            offset = first if first else self.max_offset - self.max_offset % self.file_size
            last_sent = time.monotonic()
            while not self._stop.is_set():
                end = self.max_offset
                busy = offset < end
                if busy:
                    file_end = offset - offset % self.file_size + self.file_size
                    n = min(end, file_end, offset + MAX_BODY) - offset
                    conn.sendall(HEADER.pack(offset, n) + self._read(offset, n))
                    offset += n
                    last_sent = time.monotonic()
                elif time.monotonic() - last_sent >= HEARTBEAT_S:
                    conn.sendall(HEADER.pack(offset, 0))
                    last_sent = time.monotonic()
                conn.settimeout(0.0 if busy else 0.1)
                try:
                    data = conn.recv(4096)
                except (TimeoutError, BlockingIOError):
                    continue
                if not data:
                    return
                self._take_reports(buf, data)
        except OSError:
            return
        finally:
            conn.close()

    def _take_reports(self, buf: bytearray, data: bytes) -> int | None:
        """Keep the last whole 8-byte report of what came so far (its value, else None)."""
        buf += data
        whole = len(buf) - len(buf) % 8
        if not whole:
            return None
        (value,) = REPORT.unpack_from(buf, whole - 8)
        del buf[:whole]
        self.acked = max(self.acked, value)
        return value

    def _read(self, offset: int, n: int) -> bytes:
        first = offset - offset % self.file_size
        with open(os.path.join(self.dir, f"{first:020d}"), "rb") as f:
            f.seek(offset - first)
            return f.read(n)

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for conn in self._conns:
            conn.close()
