"""What every service does before it serves: die with its parent, bind its ports exclusively,
and turn an expected start-up failure into one line and a non-zero exit.

A service started by ``rmqstore serve`` (through ``rmqstore.launch``) asks the kernel for
SIGTERM when its parent dies (``die_with_parent``), so a ``kill -9`` of ``serve`` leaves no
service behind. An expected failure (a port in use, a locked store, a bad flag or file) is
printed as one line ``error: <service>: <reason>`` on stderr and the process exits with
``START_FAILED``; a traceback means a bug.
"""

import ctypes
import ctypes.util
import os
import signal
import socket
import sys
import time
from collections.abc import Callable

START_FAILED = 2
PR_SET_PDEATHSIG = 1
PARENT_PID_ENV = "RMQSTORE_PARENT_PID"  # set by ``rmqstore serve`` for its services


class StartupError(Exception):
    """An expected reason a service cannot start: printed as one line, no traceback."""


def die_with_parent() -> None:
    """When ``rmqstore serve`` started this process, get SIGTERM as soon as serve dies (even by
    SIGKILL); if it already died between fork and here, stop now. No-op otherwise."""
    parent = os.environ.get(PARENT_PID_ENV, "")
    if not parent.isdigit():
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise StartupError(f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}")
    if os.getppid() != int(parent):
        raise StartupError(f"the parent process {parent} is gone")


ORPHAN_GRACE_S = 0.5  # calls in flight when serve has died get this long, not the usual grace


def orphaned() -> bool:
    """``rmqstore serve`` started this process and is gone: nobody supervises it any more, so
    it should stop promptly (still cleanly: flushes and closes run as on any stop)."""
    parent = os.environ.get(PARENT_PID_ENV, "")
    return parent.isdigit() and os.getppid() != int(parent)


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as (host, port); the host without brackets."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise StartupError(f"address {address!r} is not HOST:PORT with a port in 0..65535")
    return host.strip("[]"), int(port)


def check_port_free(address: str, what: str = "gRPC") -> None:
    """Raise ``StartupError`` naming the port when something already listens on ``address``
    (checked before binding, so the failure is one clear line; the bind itself is exclusive
    too, so a race between the check and the bind still fails, less politely)."""
    host, port = split_address(address)
    if port and _port_taken(host, port):
        raise in_use(what, host, port)


def in_use(what: str, host: str, port: int) -> StartupError:
    return StartupError(f"{what} port {port} on {host or '*'} is already in use")


def _port_taken(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        # as servers bind: connections in TIME_WAIT do not count, a listener does
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host or ("::" if family == socket.AF_INET6 else "0.0.0.0"), port))
        except OSError:
            return True
    return False


def run_main(name: str, main: Callable[[], int]) -> int:
    """Run a service's ``main``: a ``StartupError`` becomes one line on stderr and exit
    ``START_FAILED``."""
    try:
        return main()
    except StartupError as e:
        return fail(name, str(e))


def fail(name: str, reason: str) -> int:
    """Print ``error: <name>: <reason>`` on stderr; returns ``START_FAILED``."""
    sys.stderr.write(f"error: {name}: {reason}\n")
    sys.stderr.flush()
    return START_FAILED


class StopSignal:
    """SIGTERM and SIGINT, installed on construction and recorded in a plain attribute.

    The handler only assigns: Python runs it between two bytecodes of the main thread, which
    may hold a lock at that moment (an ``Event``'s, logging's), and taking that lock again in
    the handler hangs the process for good (two SIGTERMs in a row did so with an ``Event``).
    """

    def __init__(self) -> None:
        self.signum = 0
        signal.signal(signal.SIGTERM, self._handler)
        signal.signal(signal.SIGINT, self._handler)

    def _handler(self, signum: int, _frame: object) -> None:
        self.signum = signum

    def is_set(self) -> bool:
        return self.signum != 0

    def wait(self, timeout: float) -> bool:
        """True as soon as a signal has come, False after ``timeout`` seconds without one.

        Looks in steps of at most 50 ms: the kernel may hand the signal to another thread, and
        Python runs the handler only in the main thread, between steps."""
        deadline = time.monotonic() + timeout
        while not self.signum:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, 0.05))
        return True
