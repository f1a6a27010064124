"""``rmqstore serve`` supervises its services: a failure to start or a death is one line and
exit 3 with the others stopped; a ``kill -9`` of serve takes its services with it."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests import procs
from tests.services.cli.test_serve import _free_base

pytestmark = pytest.mark.integration

free_base = _free_base  # a port base N with N..N+3 and N+10..N+13 free


class Serve:
    """``rmqstore serve`` in a process of its own, its output collected line by line."""

    def __init__(self, *argv: str, env: dict | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", "serve", *argv],
            cwd=procs.ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})})
        self.out: list[str] = []
        self.err: list[str] = []
        self.ready = threading.Event()
        for stream, into in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._pump, args=(stream, into), daemon=True).start()

    def _pump(self, stream, into: list[str]) -> None:
        for line in stream:
            into.append(line)
            if line.startswith("serving"):
                self.ready.set()

    def wait(self, timeout: float = 120) -> int:
        return self.proc.wait(timeout)

    def children(self) -> list[int]:
        return [pid for pid in _pids() if _ppid(pid) == self.proc.pid]


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _ppid(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    return int(stat.rsplit(")", 1)[1].split()[1])


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def small(store: Path, base: int) -> tuple[str, ...]:
    return ("--store", str(store), "--port-base", str(base), "--commitlog-segment-size",
            str(1 << 20), "--index-slots", "1000", "--index-entries", "4000",
            "--cq-entries-per-file", "100")


def test_kill_9_of_serve_leaves_no_service_behind(tmp_path):
    s = Serve(*small(tmp_path / "store", free_base()))
    try:
        assert s.ready.wait(120), "".join(s.out + s.err)
        children = s.children()
        assert len(children) >= 4, children  # writer, builders, query (and what else runs)
        s.proc.send_signal(signal.SIGKILL)
        s.wait(10)
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [p for p in children if _alive(p)]
        print(f"kill -9 of serve: {len(children)} services, "
              f"{len(children) - len(left)} gone within 5 s")
        assert not left, f"services left running after kill -9 of serve: {left}"
    finally:
        for pid in s.children():
            os.kill(pid, signal.SIGKILL)


def _one_error_line(s: Serve) -> str:
    errors = [line for line in s.err if line.startswith("error: ")]
    assert len(errors) == 1, "".join(s.err)
    assert "Traceback" not in "".join(s.err), "".join(s.err)
    return errors[0].strip()


def test_a_port_in_use_fails_serve_with_one_line_and_exit_3(tmp_path):
    base = free_base()
    with socket.socket() as taken:  # something else listens on the query's port
        taken.bind(("127.0.0.1", base + 1))
        taken.listen()
        s = Serve(*small(tmp_path / "store", base))
        code = s.wait()
    line = _one_error_line(s)
    print(f"exit {code}: {line}")
    assert code == 3
    assert line == (f"error: query failed to start: gRPC port {base + 1} on 127.0.0.1 is "
                    "already in use"), line
    assert not s.children()
    assert not (tmp_path / "store" / "abort").exists(), "the writer did not stop cleanly"


def test_a_store_path_that_is_a_file_fails_serve_with_one_line(tmp_path):
    (tmp_path / "file").write_text("not a store")
    s = Serve(*small(tmp_path / "file", free_base()))
    code = s.wait()
    line = _one_error_line(s)
    print(f"exit {code}: {line}")
    assert code == 3
    assert line == f"error: commitlog failed to start: store {tmp_path / 'file'} is not a " \
                   "directory", line


def test_a_service_that_dies_stops_serve_with_exit_3(tmp_path):
    s = Serve(*small(tmp_path / "store", free_base()))
    try:
        assert s.ready.wait(120), "".join(s.out + s.err)
        index = next(p for p in s.children()
                     if " index " in Path(f"/proc/{p}/cmdline").read_text().replace("\0", " "))
        os.kill(index, signal.SIGKILL)
        code = s.wait(60)
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
    line = _one_error_line(s)
    print(f"exit {code}: {line}")
    assert code == 3
    assert line == "error: index was killed by SIGKILL; stopping the others", line
    assert not s.children()
    assert not (tmp_path / "store" / "abort").exists(), "the writer did not stop cleanly"
