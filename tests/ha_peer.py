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
With ``max_frames`` it closes the connection after that many data frames (as a slave whose
connection broke right there: ``wait_closed`` returns) and keeps the bytes it applied;
``source`` is the address it connects from (another loopback address: another host).

``PeerMaster(commitlog_dir, file_size)`` listens on ``port`` (127.0.0.1, any free port) and
serves the files of a commit-log directory (named by their 20-digit start offset, all
``file_size`` bytes) to any slave that connects:

* nothing is sent before the slave's first report; of several reports read at once only the
  last whole one counts;
* a first report 0 starts at the first byte of the last file (``end - end % file_size``), any
  other exactly there, unchecked (as RocketMQ);
* frames at most ``max_frame`` bytes (32 KiB), never across a file end, record boundaries
  ignored; a heartbeat ``[next offset][0]`` after ``heartbeat_s`` without sending;
* a later report above the served end closes the connection; a slave silent for ``idle_s``
  is dropped.

``end`` is where the served bytes stop: by default the end of the records in the directory
(walking the records' total sizes: a record starts with ``int32 total size | int32 magic``, a
BLANK end-of-file record sends the walk to the next file, a size of 0 ends the data);
``set_end`` moves it (a test can stop the stream inside a record, or serve more as files
grow). ``acked`` is the last report read from any slave, ``first_reports`` each connection's
start point.
"""

import contextlib
import os
import socket
import struct
import threading
import time

REPORT = struct.Struct(">q")
FRAME = HEADER = struct.Struct(">qi")
MAX_FRAME = MAX_BODY = 32 * 1024
HEARTBEAT_S = 5.0
BLANK_MAGIC = 0xCBD43194
RECORD_MAGICS = MAGICS = (0xDAA320A7, 0xDAA320AB)
_HEAD = struct.Struct(">iI")  # total size, magic (unsigned here)


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
        max_frames: int | None = None,
        source: str | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        self.sock = socket.create_connection(
            (host, port), timeout=connect_timeout, source_address=(source, 0) if source else None
        )
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.first_report = first_report
        self.acking = acking
        self.directory, self.file_size = directory, file_size
        self.max_frames = max_frames
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
        while len(self._buf) >= HEADER.size and not self._frames_done():
            offset, size = HEADER.unpack_from(self._buf)
            if size < 0 or size > MAX_BODY:
                raise ProtocolError(f"frame size {size} is outside 0..{MAX_BODY}")
            if len(self._buf) < HEADER.size + size:
                break
            body = bytes(self._buf[HEADER.size : HEADER.size + size])
            del self._buf[: HEADER.size + size]
            self._apply(offset, body)
        if self._frames_done():  # the connection breaks here: what else came is lost
            self.sock.close()
            self.closed = True
            return False
        return True

    def _frames_done(self) -> bool:
        return self.max_frames is not None and len(self.frames) >= self.max_frames

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


def file_name(start: int) -> str:
    return f"{start:020d}"


def records_end(directory: str, file_size: int) -> int:
    """The end of the last record of the commit-log files in ``directory``."""
    starts = sorted(int(n) for n in os.listdir(directory) if n.isdigit() and len(n) == 20)
    end = starts[0] if starts else 0
    for start in starts:
        if start != end:
            break
        with open(os.path.join(directory, file_name(start)), "rb") as f:
            data = f.read()
        pos = 0
        while pos + 8 <= len(data):
            size, magic = _HEAD.unpack_from(data, pos)
            if magic == BLANK_MAGIC:
                pos = file_size
                break
            if magic not in RECORD_MAGICS or size <= 0:
                return start + pos
            pos += size
        end = start + pos
        if pos < file_size:
            return end
    return end


class PeerMaster:
    def __init__(self, commitlog_dir, file_size: int, max_frame: int = MAX_FRAME,
                 end: int | None = None, heartbeat_s: float = 5.0, idle_s: float = 20.0) -> None:
        self.dir = str(commitlog_dir)
        self.file_size = file_size
        self.max_frame = max_frame
        self.heartbeat_s = heartbeat_s
        self.idle_s = idle_s
        self._end = records_end(self.dir, file_size) if end is None else end
        self.acked = -1  # the last report read
        self.reports = 0  # how many reports were read (heartbeats included)
        self.first_reports: list[int] = []  # each connection's start point
        self.connections = 0
        self._cond = threading.Condition()
        self._closed = False
        self._conns: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def end(self) -> int:
        return self._end

    def set_end(self, end: int) -> None:
        with self._cond:
            self._end = end
            self._cond.notify_all()

    def wait_acked(self, offset: int, timeout: float) -> bool:
        """Wait until a slave reported ``offset``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.acked != offset:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def drop_connections(self) -> None:
        with self._cond:
            conns, self._conns = self._conns, []
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._listener.close()
        self.drop_connections()

    # -- per connection ------------------------------------------------------------------
    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._cond:
                if self._closed:
                    conn.close()
                    return
                self._conns.append(conn)
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        state = {"first": None, "last_read": time.monotonic(), "done": False}
        reader = threading.Thread(target=self._read_reports, args=(conn, state), daemon=True)
        reader.start()
        try:
            with self._cond:
                while state["first"] is None and not self._stop(state):
                    self._cond.wait(0.2)
                if self._stop(state):
                    return
                first = state["first"]
                offset = self._end - self._end % self.file_size if first == 0 else first
            last_sent = time.monotonic()
            while True:
                with self._cond:
                    while (offset >= self._end and not self._stop(state)
                           and time.monotonic() - last_sent < self.heartbeat_s):
                        self._cond.wait(0.2)
                    if self._stop(state):
                        return
                    end = self._end
                if offset < end:
                    file_start = offset - offset % self.file_size
                    n = min(end, file_start + self.file_size, offset + self.max_frame) - offset
                    with open(os.path.join(self.dir, file_name(file_start)), "rb") as f:
                        f.seek(offset - file_start)
                        body = f.read(n)
                    conn.sendall(FRAME.pack(offset, len(body)) + body)
                    offset += len(body)
                else:
                    conn.sendall(FRAME.pack(offset, 0))  # heartbeat
                last_sent = time.monotonic()
        except OSError:
            pass
        finally:
            state["done"] = True
            conn.close()

    def _stop(self, state: dict) -> bool:
        return self._closed or state["done"]

    def _read_reports(self, conn: socket.socket, state: dict) -> None:
        buf = b""
        try:
            conn.settimeout(0.5)
            while not self._stop(state):
                try:
                    chunk = conn.recv(4096)
                except TimeoutError:
                    if time.monotonic() - state["last_read"] > self.idle_s:
                        break
                    continue
                if not chunk:
                    break
                state["last_read"] = time.monotonic()
                buf += chunk
                whole = len(buf) - len(buf) % 8
                if not whole:
                    continue
                value = REPORT.unpack_from(buf, whole - 8)[0]
                buf = buf[whole:]
                with self._cond:
                    self.reports += whole // 8
                    if state["first"] is None:
                        state["first"] = value
                        self.first_reports.append(value)
                    elif value > self._end:
                        break  # a report above what was served: not our slave
                    self.acked = value
                    self._cond.notify_all()
        except OSError:
            pass
        finally:
            with self._cond:
                state["done"] = True
                self._cond.notify_all()
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
