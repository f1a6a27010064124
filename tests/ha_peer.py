"""An HA peer written from ``spec/rocketmq-ha.md`` alone: stdlib only, no project module.

``PeerMaster`` plays RocketMQ 4.9's master: it serves the commit-log files of a directory
(files named by their 20-digit start offset, all ``file_size`` bytes) to any slave that
connects, as the spec says a master does:

* nothing is sent before the slave's first report (8 bytes, big-endian int64, its max offset);
  of several reports read at once only the last whole one counts;
* a first report 0 starts at the first byte of the last file (``end - end % file_size``), any
  other exactly there, unchecked (as RocketMQ);
* transfer frames ``int64 offset | int32 size | bytes``, at most ``max_frame`` bytes (32 KiB),
  never across a file end, record boundaries ignored; a heartbeat ``[next offset][0]`` after
  ``heartbeat_s`` without sending;
* a later report above the served end closes the connection; a slave silent for ``idle_s``
  is dropped.

``end`` is where the served bytes stop: by default the end of the records in the directory
(walking the records' total sizes, a BLANK end-of-file record sending the walk to the next
file); ``set_end`` moves it (a test can stop the stream inside a record). ``acked`` is the last
report read from any slave.
"""

import contextlib
import os
import socket
import struct
import threading
import time

REPORT = struct.Struct(">q")
FRAME = struct.Struct(">qi")
MAX_FRAME = 32 * 1024
BLANK_MAGIC = 0xCBD43194
RECORD_MAGICS = (0xDAA320A7, 0xDAA320AB)
_HEAD = struct.Struct(">iI")  # total size, magic (unsigned here)


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
