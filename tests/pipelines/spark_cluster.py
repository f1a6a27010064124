"""Spark off a single JVM for the tests: the ``rmqstore`` command run as its own process
against ``local-cluster[...]`` or a standalone master with two workers, all started from
PySpark's own distribution and bound to loopback."""

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RMQSTORE = Path(sys.executable).with_name("rmqstore")
START_DEADLINE_S = 120.0
JOB_DEADLINE_S = 240.0
QUICK_JIT = "-XX:TieredStopAtLevel=1"  # the JVMs only move bytes; C2 costs CPU at start


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def cluster_env() -> dict[str, str]:
    """The command's environment: loopback only, and no PYSPARK_PYTHON, so the executors'
    Python comes from ``--conf spark.pyspark.python`` alone (the cluster's own ``python3``
    here has no numpy: a job that ignored the setting fails)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_HOME=str(spark_home()),
               SPARK_DAEMON_MEMORY="256m", SPARK_DAEMON_JAVA_OPTS=QUICK_JIT)
    return env


def python_conf() -> list[str]:
    """The executors' Python, and small, quickly started JVMs (the work is in Python)."""
    return ["--conf", f"spark.pyspark.python={sys.executable}",
            "--conf", "spark.executor.memory=512m",
            "--conf", f"spark.driver.extraJavaOptions={QUICK_JIT}",
            "--conf", f"spark.executor.extraJavaOptions={QUICK_JIT}"]


def run_rmqstore(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(RMQSTORE), *args], cwd=cwd, env=cluster_env(), text=True,
                          capture_output=True, timeout=JOB_DEADLINE_S, check=False)


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen) -> re.Match:
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(errors="replace"))
        if found:
            return found
        if proc.poll() is not None:
            raise RuntimeError(f"{log.parent.name} exited with {proc.returncode}:\n"
                               f"{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)  # polling a log file for a condition, with a deadline
    raise TimeoutError(f"no {pattern!r} in {log} after {START_DEADLINE_S} s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


@contextmanager
def standalone_cluster(root: Path, workers: int = 2) -> Iterator[str]:
    """A standalone master and ``workers`` workers (one core each), every process in its own
    working directory under ``root``; yields the master URL. Stopped on exit."""
    spark_class = str(spark_home() / "bin" / "spark-class")
    procs: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        cwd = root / name
        cwd.mkdir(parents=True)
        log = cwd / "out.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([spark_class, *args], cwd=cwd, env=cluster_env(),
                                    stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        procs.append(proc)
        return proc, log

    try:
        master, log = start("master", "org.apache.spark.deploy.master.Master",
                            "--host", "127.0.0.1", "--port", "0", "--webui-port", "0")
        url = _wait_for(log, r"Starting Spark master at (spark://[\d.]+:\d+)", master).group(1)
        for n in range(workers):
            name = f"worker-{n}"
            worker, log = start(name, "org.apache.spark.deploy.worker.Worker",
                                "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                                "--cores", "1", "--memory", "1g",
                                "--work-dir", str(root / name / "work"), url)
            _wait_for(log, r"Successfully registered with master", worker)
        yield url
    finally:
        for proc in reversed(procs):
            _stop(proc)


@contextmanager
def local_cluster_work_dirs() -> Iterator[None]:
    """``local-cluster`` workers keep their executors' directories in Spark's home; remove
    the ones a test's applications left there."""
    work = spark_home() / "work"
    before = set(work.iterdir()) if work.is_dir() else set()
    try:
        yield
    finally:
        if work.is_dir():
            import shutil

            for d in set(work.iterdir()) - before:
                shutil.rmtree(d, ignore_errors=True)
