"""Service plumbing shared by every service."""

import asyncio
import subprocess
import sys
from pathlib import Path

from rmqstore.server import AsyncService

ROOT = Path(__file__).resolve().parents[2]

# SIGTERM delivered to a thread other than the main one (the kernel may pick any thread of a
# process): the main thread, waiting in Termination.wait, must still notice it and stop.
_SIGNAL_ON_A_WORKER_THREAD = """
import signal, threading, time
from rmqstore.server import Termination

termination = Termination()

def worker():
    time.sleep(0.2)
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
    time.sleep(30)  # stays alive, as a service's threads do

threading.Thread(target=worker, daemon=True).start()
termination.wait(lambda: print("stopped", flush=True))
"""


def test_termination_notices_a_signal_that_landed_on_another_thread():
    done = subprocess.run(
        [sys.executable, "-c", _SIGNAL_ON_A_WORKER_THREAD],
        cwd=ROOT, capture_output=True, text=True, timeout=20,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped"


def test_an_async_service_stops_with_nothing_left_pending_on_its_loop():
    """What ``then`` leaves behind (here a task waiting forever) is cancelled and ended
    before the loop stops, as ``asyncio.run`` would: none is destroyed while pending."""
    service = AsyncService("127.0.0.1:0")
    service.start()

    async def leave_a_task() -> asyncio.Task:
        return asyncio.get_running_loop().create_task(asyncio.Event().wait())

    left = service.call(leave_a_task())
    service.stop(grace=0)
    assert left.done() and left.cancelled()


_FROZEN = """
import gc
from rmqstore.server import freeze_startup_objects
import rmqstore.v1.query_pb2, services.query.app  # what a service holds once started
before = len(gc.get_objects())
freeze_startup_objects()
print(gc.get_freeze_count() >= before // 2, len(gc.get_objects()) < before // 10)
"""


def test_a_service_s_startup_objects_are_left_out_of_garbage_collections():
    out = subprocess.run([sys.executable, "-c", _FROZEN], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=60).stdout  # fmt: skip
    assert out.split() == ["True", "True"]
