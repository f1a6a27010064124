"""Start service processes for benchmarks (same protocol as the tests' helper)."""

import json
import os
import subprocess
from pathlib import Path

from tests.procs import ServiceProcess, start

__all__ = ["ServiceProcess", "cpu_seconds", "run_json_all", "start"]
ROOT = Path(__file__).resolve().parents[1]


READY = "ready"  # what a command that waits for the others prints once set up


def run_json_all(commands: list[list[str]], env: dict | None = None, together: bool = False
                 ) -> list[dict]:  # fmt: skip
    """Run the commands at once; the last stdout line of each, as JSON (in order).
    ``together``: each command prints ``READY`` when set up and then waits for a line on its
    stdin, sent to all once all are ready, so no command's measured part overlaps another's
    start-up (imports, connections, warm-up)."""
    ps = [subprocess.Popen(c, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           stdin=subprocess.PIPE if together else None, text=True, env=env)
          for c in commands]  # fmt: skip
    if together:
        for p in ps:
            assert p.stdout is not None and p.stdin is not None
            line = p.stdout.readline().strip()
            if line != READY:
                p.kill()
                _stdout, stderr = p.communicate(timeout=60)
                raise RuntimeError(f"{p.args!r} did not get ready ({line!r}):\n{stderr[-3000:]}")
        for p in ps:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
    out = []
    for p in ps:
        stdout, stderr = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"{p.args!r} failed:\n{stderr[-3000:]}")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a live process has used so far, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
