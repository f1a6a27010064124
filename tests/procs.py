"""Start real service processes for integration tests.

Every service's ``__main__`` prints one line ``rmqstore <name> listening on HOST:PORT`` on
stdout once it serves (``--listen 127.0.0.1:0`` picks a free port).
"""

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# Ports handed out are drawn below the kernel's ephemeral range (32768 and up on Linux), where
# no outgoing connection of another test can take one between the check and the service's
# bind (a port the kernel picked for ``bind(0)`` and let go can be). `serve --port-base`
# ranges come from one part, single ports from another, so that neither takes the other's.
# Tests often take a port long before a service binds it (a node restarted on the same
# address): a process never hands out a port twice, and each xdist worker draws from a part
# of ``PORTS`` of its own, so two tests never hold the same port unbound.
BASES = range(20000, 30000 - 32)  # a base and the 32 ports above it
PORTS = range(10000, 20000)
WORKER_SLICES = 4  # gw0..gw3 draw from a quarter of PORTS each (others: from all of it)
_handed_out: set[int] = set()


def _worker_ports() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not worker[2:].isdigit():
        return PORTS
    n = int(worker[2:]) % WORKER_SLICES
    size = len(PORTS) // WORKER_SLICES
    return range(PORTS.start + n * size, PORTS.start + (n + 1) * size)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, for a service to bind; never one
    this process handed out before."""
    ports = _worker_ports()
    if len(_handed_out) > len(ports) // 2:
        _handed_out.clear()  # a very long run: start again
    while True:
        port = random.choice(ports)
        if port not in _handed_out and _bindable(port):
            _handed_out.add(port)
            return port


def free_port_base(slots: Sequence[int]) -> int:
    """A port base N with N + k free on 127.0.0.1 for every k in ``slots``."""
    while True:
        base = random.choice(BASES)
        if all(_bindable(base + k) for k in slots):
            return base


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def children(pid: int) -> list[int]:
    """The processes ``pid`` started that still run (none once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]


def wait_stopped(pid: int, timeout: float = 30) -> None:
    """Until every thread of ``pid`` is stopped (state T) after a SIGSTOP: the stop takes a
    thread only when it next leaves the kernel, and a loaded machine may leave one running a
    while."""
    deadline = time.monotonic() + timeout
    while True:
        states = {Path(f"/proc/{pid}/task/{t}/stat").read_text().rsplit(")", 1)[1].split()[0]
                  for t in os.listdir(f"/proc/{pid}/task")}  # fmt: skip
        if states <= {"T", "t"}:
            return
        assert time.monotonic() < deadline, f"{pid} not stopped: {states}"
        time.sleep(0.01)


@dataclass
class ServiceProcess:
    proc: subprocess.Popen
    address: str
    lines: list[str] = field(default_factory=list)

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM and wait for a clean exit; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def start(
    module: str, *args: str, timeout: float = 60.0, env: dict | None = None
) -> ServiceProcess:
    """Run ``python -m <module> <args>`` and wait for its listening line."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=full_env,
    )
    lines: list[str] = []
    found = threading.Event()
    address: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if not found.is_set() and " listening on " in line:
                address.append(line.rsplit(" listening on ", 1)[1].strip())
                found.set()
        found.set()

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not found.wait(0.05):
        if time.monotonic() > deadline:
            proc.kill()
            raise TimeoutError(f"{module} did not start:\n" + "\n".join(lines[-30:]))
    if not address:
        proc.wait(5)
        raise RuntimeError(f"{module} exited ({proc.returncode}):\n" + "\n".join(lines[-30:]))
    return ServiceProcess(proc, address[0], lines)


class JsonLines:
    """A client process whose JSON lines (``{"event": ...}``) are collected as they come,
    each stamped with its arrival time ``t``; its stderr is kept for ``explain``."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> None:
        self.proc = subprocess.Popen(cmd, env=env, cwd=cwd, text=True, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        self.events: list[dict] = []
        self.err: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=lambda: self.err.extend(self.proc.stderr or ()),
                         daemon=True).start()  # fmt: skip

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                e = json.loads(line)
                e["t"] = time.time()
                self.events.append(e)

    def of(self, kind: str) -> list[dict]:
        return [e for e in list(self.events) if e.get("event") == kind]

    def explain(self) -> str:
        return f"events: {self.events[-20:]}\nstderr: {''.join(self.err)[-3000:]}"
