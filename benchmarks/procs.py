"""Start service processes for benchmarks (same protocol as the tests' helper)."""

from tests.procs import ServiceProcess, start

__all__ = ["ServiceProcess", "start"]
