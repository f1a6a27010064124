"""The Spark session the pipeline jobs run on: small, local by default, no web UI."""

import os
import sys
import tempfile
import zipfile
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


def prepare_environment(master: str = DEFAULT_MASTER) -> None:
    """Executors run this interpreter; a local Spark binds to loopback unless told otherwise."""
    if is_local(master):
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
    spark.sparkContext.setLogLevel("ERROR")
    if not is_local(master):  # executors elsewhere get our code with the job
        spark.sparkContext.addPyFile(str(code_archive(Path(tempfile.mkdtemp(prefix="rmqstore-")))))
    return spark


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
