"""Start service processes for benchmarks (same protocol as the tests' helper)."""

import os

from tests.procs import ServiceProcess, start

__all__ = ["ServiceProcess", "cpu_seconds", "start"]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a live process has used so far, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
