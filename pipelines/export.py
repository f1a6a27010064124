"""Export decoded records to Parquet, partitioned by topic and UTC date of the store time.

``out`` must not exist (or be an empty directory): Spark writes to a hidden sibling that is
renamed to ``out`` once the write has completed. Analysts then query it with Spark SQL, e.g.
``spark.read.parquet(out).where("topic = 'TopicA' and array_contains(keys, 'order-1')")``.
"""

import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from pipelines.progress import Progress
from pipelines.records import row
from pipelines.scan import DictParam, ScanOutcome, ScanPlan, outcome, scan_range
from pipelines.source import DEFAULT_SPLIT_BYTES, Corruption, replanned_note
from rmqstore.errors import InvalidArgumentError

PARTITION_COLUMNS = ("topic", "date")


def schema():
    from pyspark.sql import types as T

    return T.StructType([
        T.StructField("topic", T.StringType(), False),
        T.StructField("queue_id", T.IntegerType(), False),
        T.StructField("queue_offset", T.LongType(), False),
        T.StructField("phy_offset", T.LongType(), False),
        T.StructField("size", T.IntegerType(), False),
        T.StructField("sys_flag", T.IntegerType(), False),
        T.StructField("flag", T.IntegerType(), False),
        T.StructField("store_timestamp", T.LongType(), False),
        T.StructField("born_timestamp", T.LongType(), False),
        T.StructField("store_host", T.StringType(), False),
        T.StructField("born_host", T.StringType(), False),
        T.StructField("msg_id", T.StringType(), False),
        T.StructField("keys", T.ArrayType(T.StringType(), False), False),
        T.StructField("tags", T.StringType(), True),
        T.StructField("uniq_key", T.StringType(), True),
        T.StructField("properties", T.MapType(T.StringType(), T.StringType(), False), False),
        T.StructField("body", T.BinaryType(), False),
        T.StructField("body_crc", T.IntegerType(), False),
        T.StructField("reconsume_times", T.IntegerType(), False),
        T.StructField("prepared_transaction_offset", T.LongType(), False),
        T.StructField("date", T.StringType(), False),
    ])


@dataclass
class ExportReport:
    records: int = 0
    bytes: int = 0
    corruptions: list[Corruption] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _row(_number: int, rec) -> tuple:
    return row(rec)


def _row_if(number: int, rec, included: frozenset) -> tuple | None:
    return row(rec) if number in included else None


def _write(spark, plan: ScanPlan, target: Path, convert, check_crc: bool, tracker):
    sc = spark.sparkContext
    ends = sc.accumulator({}, DictParam())
    rdd = sc.parallelize(plan.ranges, max(len(plan.ranges), 1)).flatMap(
        partial(scan_range, convert=convert, check_crc=check_crc, ends_acc=ends,
                tracker=tracker))
    df = spark.createDataFrame(rdd, schema())
    df.write.partitionBy(*PARTITION_COLUMNS).mode("overwrite").parquet(str(target))
    return ends.value


def export(spark, store: str | Path, out: str | Path, split_bytes: int = DEFAULT_SPLIT_BYTES,
           check_crc: bool = True, progress: bool = False,
           progress_interval: float = 2.0) -> ExportReport:
    started = time.monotonic()
    out = Path(out).absolute()
    if out.exists():
        if not out.is_dir() or any(out.iterdir()):
            raise InvalidArgumentError(f"export output {out} exists and is not empty")
        out.rmdir()
    if not out.parent.is_dir():
        raise InvalidArgumentError(f"export output parent {out.parent} is not a directory")
    plan = ScanPlan.of(store, split_bytes)
    target = out.parent / f".{out.name}.export-{uuid.uuid4().hex[:12]}"
    try:
        with Progress(spark.sparkContext, "export",
                      {r.number: r.segment.path for r in plan.ranges}, plan.total_bytes,
                      interval=progress_interval, enabled=progress) as prog:
            ends = _write(spark, plan, target, _row, check_crc, prog.tracker())
            result: ScanOutcome = outcome(plan, ends)
            replanned = []
            if result.misaligned:  # cut inside a record: cut again by walking, write again
                replanned.append(replanned_note(result.misaligned))
                shutil.rmtree(target, ignore_errors=True)
                plan = ScanPlan.of(store, split_bytes, walk=True)
                result = outcome(plan, _write(spark, plan, target, _row, check_crc, None))
            if not result.complete:  # data after a corrupt record: write again without it
                shutil.rmtree(target, ignore_errors=True)
                _write(spark, plan, target,
                       partial(_row_if, included=frozenset(result.included)), check_crc, None)
        os.rename(target, out)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return ExportReport(result.records, result.bytes, result.corruptions, replanned + result.notes,
                        time.monotonic() - started)
