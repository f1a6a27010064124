"""A service stops once on SIGTERM/SIGINT however many arrive. The handler takes no lock: one
that set an ``Event`` hung a query service for good when a second signal came while the first
handler held the Event's lock (seen once, under load; this storm does not reproduce that race
on demand, it checks that a stop happens exactly once)."""

import subprocess
import sys

from tests.procs import ROOT

STORM = """
import os, signal, threading
from rmqstore.server import Termination
t = Termination()
def storm():
    for _ in range(2000):
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=storm, daemon=True).start()
t.wait(lambda: print("stopped", flush=True))
"""


def test_a_storm_of_signals_stops_a_service_once():
    done = subprocess.run([sys.executable, "-c", STORM], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "stopped\n"


def test_stop_signal_waits_its_timeout_without_a_signal():
    code = ("from rmqstore.startup import StopSignal; s = StopSignal(); "
            "print(s.wait(0.1), s.is_set())")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout == "False False\n"
