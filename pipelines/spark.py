"""The Spark session the pipeline jobs run on: small, local by default, no web UI.

The executors' Python: ``spark.pyspark.python`` when it is configured (``--conf`` or the
cluster's ``spark-defaults.conf``), else ``PYSPARK_PYTHON``; else, on a local master, this
interpreter (it is the same machine), and on a cluster the cluster's own ``python3``. This
interpreter's path is never forced on a cluster, where it need not exist.
"""

import os
import sys
import tempfile
import zipfile
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
# A local Spark's JVM only moves bytes between the Python workers that do the work; its
# optimizing JIT compiler (C2) spent about 1 s of CPU per job here, a third of a 1 GiB
# rebuild's decode stage on 2 cores. The quick compiler alone is enough for that.
LOCAL_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def is_single_machine(master: str) -> bool:
    """``local`` and ``local-cluster``: every executor runs on this machine."""
    return is_local(master) or master.startswith("local-cluster[")


def prepare_environment(master: str = DEFAULT_MASTER) -> None:
    """On this machine executors run this interpreter, and Spark binds to loopback unless
    told otherwise; a cluster's executors keep their own Python (see the module's doc)."""
    if is_single_machine(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def code_archive(directory: Path) -> Path:
    """A zip of the packages executors import (``rmqstore``, ``pipelines``), for a cluster."""
    root = Path(__file__).resolve().parent.parent
    archive = directory / "rmqstore-pipelines.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for package in ("rmqstore", "pipelines"):
            for path in sorted((root / package).rglob("*.py")):
                z.write(path, path.relative_to(root))
    return archive


def create_session(master: str = DEFAULT_MASTER, app_name: str = "rmqstore",
                   shuffle_partitions: int = 4,
                   extra_conf: dict[str, str] | None = None) -> "SparkSession":
    """A Spark session for the pipeline; reuses the active one when there is one."""
    prepare_environment(master)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", str(shuffle_partitions))
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if is_local(master):
        builder = (
            builder.config("spark.driver.bindAddress", os.environ["SPARK_LOCAL_IP"])
            .config("spark.driver.extraJavaOptions", LOCAL_JVM_OPTIONS)
        )
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    sc.setLogLevel("ERROR")
    configured = sc.getConf().get("spark.pyspark.python", None)
    if configured:  # Spark reads it only when spark-submit starts the driver: apply it here
        sc.pythonExec = configured
    if not is_local(master):  # executors elsewhere get our code with the job
        sc.addPyFile(str(code_archive(Path(tempfile.mkdtemp(prefix="rmqstore-")))))
    return spark


def _missing_here(paths: list[str], _: object) -> tuple[str, list[str]]:
    """A probe task: this executor's host and which of ``paths`` it cannot see."""
    import socket

    return socket.gethostname(), [p for p in paths if not os.path.isdir(p)]


def check_visible(spark: "SparkSession", paths: dict[str, Path]) -> None:
    """Refuse a job whose directories the executors cannot see (``paths``: what each is, for
    the message), before any task reads or writes: a cluster's executors open them on their
    own machines, so they must be on a filesystem mounted at the same path everywhere."""
    from rmqstore.errors import InvalidArgumentError

    sc = spark.sparkContext
    wanted = [str(p) for p in paths.values()]
    n = max(2, sc.defaultParallelism)
    seen = sc.parallelize(range(n), n).map(partial(_missing_here, wanted)).collect()
    for host, missing in seen:
        if missing:
            what = next(k for k, v in paths.items() if str(v) == missing[0])
            raise InvalidArgumentError(
                f"{what} {missing[0]} is not visible to the Spark executors on {host}: on a "
                "cluster the store and the output must be on a filesystem that every "
                "executor mounts at the same path")


class SessionScope:
    """``with SessionScope(master) as spark``: stops the session only if it created it."""

    def __init__(self, master: str = DEFAULT_MASTER, **kwargs) -> None:
        self.master = master
        self.kwargs = kwargs
        self._created = False
        self.spark: SparkSession | None = None

    def __enter__(self) -> "SparkSession":
        prepare_environment(self.master)
        from pyspark.sql import SparkSession

        self._created = SparkSession.getActiveSession() is None
        self.spark = create_session(self.master, **self.kwargs)
        return self.spark

    def __exit__(self, *exc) -> None:
        if self._created and self.spark is not None:
            self.spark.stop()
