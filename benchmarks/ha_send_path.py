"""The master's replication send path alone: its CPU per put, with and without a slave.

``python -m benchmarks.ha_send_path [PUTS]``: the master's ``Replication`` (its listener,
connections, sender and report reading, as the writer runs them) on a store of one
memory-mapped segment file that stands in for the commit-log engine (the bytes are in the page
cache, as a put leaves them); a slave process on another core that takes the frames and
reports after every read that held whole frames, as ``--role slave`` does. A "put" grows the
end by ``PUT_BYTES`` (100 records of a 1 KiB body) and calls ``replicated``, every ``GAP_S``,
as a producer that leaves the master's core idle between puts (a quiet machine, where every
wake-up costs a scheduler round trip). Prints this process's CPU per put without a slave,
with one, and the difference: what the send path costs a put. ``bench_replication`` measures
the whole writer; this is the part of it that replication adds, with far less noise.
"""

import asyncio
import json
import mmap
import os
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

from services.commitlog.config import ASYNC_MASTER
from services.commitlog.ha_master import Replication

PUT_BYTES = 115_000  # 100 records of a 1 KiB body with a key and a tag
GAP_S = 0.001
SEGMENT = 1 << 30
SLAVE = r"""
import os, socket, struct, sys
os.sched_setaffinity(0, {int(sys.argv[2])})
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
s.sendall(struct.pack(">q", 0))
buf, end = bytearray(), 0
while chunk := s.recv(256 * 1024):
    buf += chunk
    pos, took = 0, False
    while len(buf) - pos >= 12:
        offset, n = struct.unpack_from(">qi", buf, pos)
        if len(buf) - pos - 12 < n:
            break
        pos, end, took = pos + 12 + n, offset + n, took or n > 0
    del buf[:pos]
    if took:
        s.sendall(struct.pack(">q", end))
"""


async def _cpu_per_put(puts: int, slave: bool) -> float:
    """This process's CPU seconds per put (only the puts: the set-up and the catch-up after
    the last put are not counted)."""
    with tempfile.TemporaryFile() as f:
        f.truncate(SEGMENT)
        with mmap.mmap(f.fileno(), SEGMENT) as m:
            block = b"x" * (1 << 20)
            for i in range(0, min(SEGMENT, puts * PUT_BYTES + len(block)), len(block)):
                m[i : i + len(block)] = block[: SEGMENT - i]
            seg = SimpleNamespace(start=0, map=m)
            engine = SimpleNamespace(
                max_offset=0, min_offset=0, config=SimpleNamespace(segment_size=SEGMENT),
                segments=SimpleNamespace(find=lambda _offset: seg))  # fmt: skip
            r = Replication(engine, ASYNC_MASTER)
            port = await r.listen("127.0.0.1", 0)
            cores = sorted(os.sched_getaffinity(0))
            follower = None
            if slave:
                follower = subprocess.Popen(
                    [sys.executable, "-c", SLAVE, str(port), str(cores[-1])])
                deadline = time.monotonic() + 30
                while not r.slaves or next(iter(r.slaves)).sent < 0:
                    if follower.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("the slave process never followed the master")
                    await asyncio.sleep(0.01)
            try:
                t0 = time.process_time()
                for _ in range(puts):
                    engine.max_offset += PUT_BYTES
                    r.replicated(engine.max_offset)
                    await asyncio.sleep(GAP_S)
                cpu = time.process_time() - t0
                while slave and r.acked < engine.max_offset:
                    await asyncio.sleep(0.01)
            finally:
                await r.close()
                if follower is not None:
                    follower.kill()
                    follower.wait()
    return cpu / puts


def main() -> None:
    puts = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[0]})  # the slave gets the last core
    alone = asyncio.run(_cpu_per_put(puts, False))
    with_slave = asyncio.run(_cpu_per_put(puts, True))
    print(json.dumps({"puts": puts, "put bytes": PUT_BYTES,
                      "no slave µs/put": round(alone * 1e6, 1),
                      "slave µs/put": round(with_slave * 1e6, 1),
                      "send path µs/put": round((with_slave - alone) * 1e6, 1)},
                     ensure_ascii=False))  # fmt: skip


if __name__ == "__main__":
    main()
