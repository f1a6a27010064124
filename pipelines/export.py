"""Export decoded records to Parquet, partitioned by topic and UTC date of the store time.

Each task turns one byte range into Arrow record batches (``export_batches``) and writes them
as Parquet files in Hive's layout, ``topic=<topic>/date=<yyyy-MM-dd>/part-<range>-<n>.parquet``,
which Spark, Hive and pyarrow read as partitions; a topic is escaped in its directory's name
as Spark escapes partition values (``partition_value``), and a store time outside the years
1 to 9999 has a null date (``date=__HIVE_DEFAULT_PARTITION__``). An export without records
holds one Parquet file with the columns and no rows. ``out`` must not exist (or be an
empty directory): the tasks write to a hidden sibling that is renamed to ``out`` once every
range is written. The stores of several brokers (``stores.StoreRef`` named) are one job and
one dataset, whose first column ``broker`` names each row's. Analysts then query it with Spark
SQL, e.g.
``spark.read.parquet(out).where("topic = 'TopicA' and array_contains(keys, 'order-1')")``.
"""

import os
import shutil
import time
import urllib.parse
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from pipelines.export_batches import range_batches, schema
from pipelines.progress import Progress, report_range
from pipelines.report import JobReport
from pipelines.scan import ScanOutcome, ScanPlan, outcome
from pipelines.source import DEFAULT_SPLIT_BYTES, ByteRange, Corruption, RangeEnd, replanned_note
from pipelines.staging import fresh_output
from pipelines.stores import StoreRef, as_stores
from pipelines.task_errors import about

PARTITION_COLUMNS = ("topic", "date")
SUCCESS_MARKER = "_SUCCESS"  # written last, as Spark's own writer does
EMPTY_FILE = "empty.parquet"  # the columns, without rows, when no record was exported
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"  # Spark's and Hive's name for a null or ''
# what Spark writes as %XX in a partition value: control characters, and "#%'*/:=?\{[]^
_ESCAPED = frozenset(chr(c) for c in range(0x20)) | frozenset("\"#%'*/:=?\\\x7f{[]^")


@dataclass
class ExportReport(JobReport):
    records: int = 0
    bytes: int = 0
    corruptions: list[Corruption] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    brokers: dict[str, int] = field(default_factory=dict)  # records per broker (named stores)


def partition_value(text: str) -> str:
    """``text`` as a partition directory's value, escaped as Spark escapes it (and reads it
    back): the characters of ``_ESCAPED`` as ``%XX``, any other character as it is."""
    if not text:
        return NULL_PARTITION
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text)


def _file_prefix(number: int) -> str:
    return f"part-{number:05d}-"


def _export_range(r: ByteRange, check_crc: bool, target: str, columns: pa.Schema, tracker,
                  ) -> tuple[int, tuple[RangeEnd, int]]:
    """Write one range's records under ``target``; (its number, (its end, its records))."""
    ended: list[tuple[RangeEnd, int]] = []

    def batches():
        for item in range_batches(r, check_crc):
            if isinstance(item, tuple):
                ended.append(item)
            else:
                yield item

    with about(f"exporting {r.where} to {target}"):
        _write_dataset(batches(), target, r.number, columns)
    (end, count), = ended
    if tracker is not None:
        report_range(tracker, r.number, end.position - r.begin)
    return r.number, (end, count)


def _write_dataset(batches, target: str, number: int, columns: pa.Schema) -> None:
    ds.write_dataset(
        batches, target, schema=columns, format="parquet",
        partitioning=list(PARTITION_COLUMNS), partitioning_flavor="hive",
        basename_template=_file_prefix(number) + "{i}.parquet",
        existing_data_behavior="overwrite_or_ignore",  # other ranges' files stay
        max_partitions=1 << 30, preserve_order=True,  # commitlog order in every file
    )  # fmt: skip


def _write(spark, plan: ScanPlan, target: Path, check_crc: bool, tracker,
           ) -> dict[int, tuple[RangeEnd, int]]:
    """Write the records of ``plan``'s ranges as Parquet; each range's (end, records)."""
    target.mkdir()
    if not plan.ranges:
        return {}
    return dict(spark.sparkContext.parallelize(plan.ranges, len(plan.ranges))
                .map(partial(_export_range, check_crc=check_crc, target=str(target),
                             columns=schema(bool(plan.brokers)), tracker=tracker))
                .collect())


def _spark_names(target: Path) -> None:
    """Rename the topic directories from pyarrow's names to Spark's. pyarrow URI-encodes a
    value's UTF-8 bytes; Spark reads each ``%XX`` back as one character, which is right only
    for ASCII."""
    prefix = f"{PARTITION_COLUMNS[0]}="
    for d in target.iterdir():
        if d.is_dir() and d.name.startswith(prefix):
            value = urllib.parse.unquote(d.name[len(prefix):])
            name = prefix + partition_value(value)
            if name != d.name:
                d.rename(target / name)


def _drop_ranges(target: Path, numbers: set[int]) -> None:
    """Delete the files of these ranges, and the partition directories left empty."""
    prefixes = tuple(_file_prefix(n) for n in numbers)
    for directory, _, files in os.walk(target, topdown=False):
        for name in files:
            if name.startswith(prefixes):
                os.unlink(os.path.join(directory, name))
        if directory != str(target) and not os.listdir(directory):
            os.rmdir(directory)


def export(spark, stores: str | Path | list[StoreRef], out: str | Path,
           split_bytes: int = DEFAULT_SPLIT_BYTES, check_crc: bool = True,
           progress: bool = False, progress_interval: float = 2.0) -> ExportReport:
    """Export every record of ``stores`` (one path, or named stores: one dataset with a
    ``broker`` column) to the new directory ``out``."""
    started = time.monotonic()
    out, target = fresh_output(out, "export")
    stores = as_stores(stores)
    plan = ScanPlan.of(stores, split_bytes)
    try:
        with Progress(spark.sparkContext, "export",
                      {r.number: r.segment.path for r in plan.ranges}, plan.total_bytes,
                      interval=progress_interval, enabled=progress) as prog:
            ends = _write(spark, plan, target, check_crc, prog.tracker())
            result: ScanOutcome = outcome(plan, ends)
            replanned = []
            if result.misaligned:  # cut inside a record: cut again by walking, write again
                replanned.append(replanned_note(result.misaligned))
                shutil.rmtree(target)
                plan = ScanPlan.of(stores, split_bytes, walk=True)
                result = outcome(plan, _write(spark, plan, target, check_crc, None))
        # data after a corrupt record does not count: its ranges' files go
        _drop_ranges(target, {r.number for r in plan.ranges} - result.included)
        _spark_names(target)
        if not result.records:  # readers still find the columns (Spark cannot infer them)
            pq.write_table(schema(bool(plan.brokers)).empty_table(), target / EMPTY_FILE)
        (target / SUCCESS_MARKER).write_bytes(b"")
        os.rename(target, out)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return ExportReport(result.records, result.bytes, result.corruptions, replanned + result.notes,
                        time.monotonic() - started, result.brokers)
