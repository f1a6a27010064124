"""Fixtures of the proxy's tests: ``rmqstore serve`` on a free port range, the official
clients' interpreters (installed by ``make test-deps``), and a raw protocol stub."""

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests import procs

CLIENTS = procs.ROOT / "tests" / "clients"
PYTHON_CLIENT = CLIENTS / ".venv" / "bin" / "python"
NODE_MODULES = CLIENTS / "node_modules" / "rocketmq-client-nodejs"
SLOTS = (0, 1, 2, 3, 4, 6, 7, 8, 10, 11, 12, 13, 14, 17, 18)  # 6: the writer's HA port


def free_base() -> int:
    return procs.free_port_base(SLOTS)


class Serve:
    """``rmqstore serve`` in a process of its own; ``stop()`` ends it cleanly.

    The port range is checked free, yet a test running beside it may take one of its ports
    before serve binds it: serve then exits saying so, and it is started again on another
    range."""

    ATTEMPTS = 5

    def __init__(self, store: Path, *extra: str) -> None:
        self.store = store
        for _ in range(self.ATTEMPTS):
            self.base = free_base()
            if self._start(extra) or not any("is already in use" in x for x in self.lines):
                break
        if not self.serving:
            self.stop()
            raise RuntimeError("serve did not start:\n" + "".join(self.lines))

    def _start(self, extra: tuple[str, ...]) -> bool:
        """Start serve on ``self.base``; whether it serves (else it has exited)."""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", "serve", "--store", str(self.store),
             "--port-base", str(self.base), "--commitlog-segment-size", str(8 << 20),
             "--index-slots", "1000", "--index-entries", "4000", *extra],
            cwd=procs.ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self.serving = False
        ready = threading.Event()

        def pump() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line)
                if line.startswith("serving"):
                    self.serving = True
                    ready.set()
            ready.set()  # EOF: it exited

        threading.Thread(target=pump, daemon=True).start()
        ready.wait(90)
        if not self.serving:
            self.stop()
        return self.serving

    def address(self, slot: int) -> str:
        return f"127.0.0.1:{self.base + slot}"

    @property
    def proxy(self) -> str:
        return self.address(4)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def client_env(home: Path) -> dict[str, str]:
    """The clients write logs under $HOME/logs: keep them in the test's directory."""
    home.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "HOME": str(home)}


@pytest.fixture(scope="session")
def client_runtimes() -> None:
    missing = [str(p) for p in (PYTHON_CLIENT, NODE_MODULES) if not p.exists()]
    if missing:
        pytest.fail(f"the official clients are not installed ({', '.join(missing)}): "
                    "run `make test-deps`")  # fmt: skip
