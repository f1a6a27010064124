"""``rmqstore rebuild | export | find``: the Spark pipeline over commitlog segments.

Local Spark is the default (``--master local[*]``). On any other master the store and output
paths are made absolute and must be visible to every executor at the same path (checked
before the job starts); the executors' Python is ``spark.pyspark.python`` (``--conf``) or the
cluster's own. A failed task is reported as one ``error:`` line: its Python exception and the
file and position it was working on. ``export`` and ``find`` also read the stores of several
brokers in one job (``--store NAME=PATH,NAME=PATH``), checked before Spark starts.
"""

import argparse
import json
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from rmqstore.errors import StoreError
from services.cli.errors import NOT_FOUND, UNAVAILABLE, USAGE, CliError

MIB = 1024 * 1024
FIND_PRINT_LIMIT = 20


def _common(p: argparse.ArgumentParser, several: bool = True) -> None:
    p.add_argument("--store", required=True,
                   help="store root (holding commitlog/) or a commitlog directory" + (
                       "; or NAME=PATH,NAME=PATH,...: the stores of several brokers, read as "
                       "one, each row with its broker" if several else ""))
    p.add_argument("--master", default="local[*]",
                   help="Spark master (default local[*]); on a cluster, --store and --out must "
                        "be on a filesystem every executor mounts at the same path")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting, e.g. spark.pyspark.python=/opt/venv/bin/python "
                        "(the executors' Python); repeatable")
    p.add_argument("--split-mib", type=int, default=64,
                   help="cut segments larger than this into ranges of about this size")
    p.add_argument("--no-crc", action="store_true", help="skip body CRC checks")


def register(subparsers) -> None:
    p = subparsers.add_parser("rebuild", help="rebuild consume queues and index files on Spark")
    _common(p, several=False)
    p.add_argument("--out", required=True,
                   help="output root: a new directory, or an existing one without "
                        "consumequeue/ and index/ (the store root itself, say)")
    p.add_argument("--replace", action="store_true",
                   help="replace consumequeue/ and index/ already in --out")
    p.add_argument("--index-slots", type=int, default=None)
    p.add_argument("--index-entries", type=int, default=None)
    p.add_argument("--cq-entries-per-file", type=int, default=None)
    p.add_argument("--delay-levels", default=None,
                   help="the writer's --delay-levels, if the store was written with others "
                        "than RocketMQ's 18 (delayed messages' consume-queue tags code)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(run=run_rebuild)

    p = subparsers.add_parser("export", help="export decoded records to Parquet on Spark")
    _common(p)
    p.add_argument("--out", required=True, help="new directory for the Parquet dataset")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(run=run_export)

    p = subparsers.add_parser("find", help="scan commitlogs for a key or time range (no index)")
    _common(p)
    p.add_argument("--topic")
    p.add_argument("--key", help="a KEYS token or a UNIQ_KEY")
    p.add_argument("--begin", type=int, help="store time from (ms, inclusive)")
    p.add_argument("--end", type=int, help="store time to (ms, inclusive)")
    p.add_argument("--out", help="new directory for every match, as JSON lines "
                                 "(required on a cluster; else a temporary one)")
    p.add_argument("--limit", type=int, default=FIND_PRINT_LIMIT,
                   help=f"print at most this many matches (default {FIND_PRINT_LIMIT}; "
                        "0: none); --out holds them all")
    p.add_argument("--json", action="store_true", help="one JSON document per message")
    p.set_defaults(run=run_find)


def _spark_conf(pairs: list[str]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--conf {pair!r}: expected KEY=VALUE")
        conf[key.strip()] = value
    return conf


def _spark_error_types() -> tuple[type[BaseException], ...]:
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return PySparkException, Py4JError


def _stores(args, what: str, several: bool = True) -> list:
    """``--store`` as ``StoreRef``s, checked (code 2 and nothing started if it is wrong)."""
    from pipelines.stores import named, parse_stores

    try:
        stores = parse_stores(args.store)
    except StoreError as e:
        raise CliError(f"{what}: {e}", USAGE) from None
    if not several and named(stores):
        raise CliError(f"{what} reads one store: --store PATH, not NAME=PATH", USAGE)
    return stores


@contextmanager
def _job(args, what: str, stores: list, outputs: dict[str, Path]):
    """A Spark session for one job on ``args.master``, with its failures as ``CliError``s:
    bad input (code 2), a failed Spark job or session (3, with the task's own error)."""
    from pipelines.source import commitlog_dir
    from pipelines.spark import SessionScope, check_visible, is_single_machine

    conf = _spark_conf(args.conf)
    try:
        paths = {("--store" if s.broker is None else f"--store {s.broker}"):
                 commitlog_dir(s.path) for s in stores}
        paths.update(outputs)
        with SessionScope(args.master, app_name=f"rmqstore-{what}", extra_conf=conf) as spark:
            if not is_single_machine(args.master):
                check_visible(spark, paths)
            yield spark
    except StoreError as e:
        raise CliError(f"{what}: {e}", USAGE) from None
    except _spark_error_types() as e:
        from pipelines.task_errors import task_error_message

        raise CliError(f"{what} failed, nothing was written: {task_error_message(e)}",
                       UNAVAILABLE) from None


def _output(path: str) -> Path:
    """An output path made absolute (executors resolve relative ones elsewhere)."""
    return Path(path).expanduser().absolute()


def _warn(corruptions, notes) -> None:
    for c in corruptions:
        print(f"warning: {c}; the data read stops there", file=sys.stderr)
    for n in notes:
        print(f"warning: {n}", file=sys.stderr)


def run_rebuild(args) -> int:
    from pipelines.rebuild.job import RebuildSettings, rebuild

    out = _output(args.out)
    try:
        defaults = RebuildSettings()
        settings = RebuildSettings(
            index_slots=args.index_slots or defaults.index_slots,
            index_entries=args.index_entries or defaults.index_entries,
            cq_entries_per_file=args.cq_entries_per_file or defaults.cq_entries_per_file,
            split_bytes=args.split_mib * MIB, check_crc=not args.no_crc,
            delay_levels=args.delay_levels or defaults.delay_levels,
        )
    except StoreError as e:
        raise CliError(f"rebuild: {e}", USAGE) from None
    [store] = _stores(args, "rebuild", several=False)
    with _job(args, "rebuild", [store], {"the parent of --out": out.parent}) as spark:
        report = rebuild(spark, store.path, out, settings, replace=args.replace,
                         progress=not args.quiet)
    _warn(report.corruptions, report.notes)
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        print(f"rebuilt {out}: {report.records} records, {report.bytes} bytes of "
              f"commitlog in {report.seconds:.1f} s ({report.mib_per_s:.1f} MiB/s); "
              f"{report.cq_files} consume-queue files ({report.queues} queues, "
              f"{report.cq_units} units), {len(report.index_files)} index files "
              f"({report.index_keys} keys)")
    return 0


def run_export(args) -> int:
    from pipelines.export import export

    out = _output(args.out)
    stores = _stores(args, "export")
    with _job(args, "export", stores, {"the parent of --out": out.parent}) as spark:
        report = export(spark, stores, out, split_bytes=args.split_mib * MIB,
                        check_crc=not args.no_crc, progress=not args.quiet)
    _warn(report.corruptions, report.notes)
    if args.json:
        print(json.dumps(report.to_dict()))
        return 0
    brokers = ", ".join(f"{b} {n}" for b, n in report.brokers.items())
    print(f"exported {report.records} records ({report.bytes} bytes of commitlog"
          f"{f'; per broker: {brokers}' if brokers else ''}) to {out} in "
          f"{report.seconds:.1f} s ({report.mib_per_s:.1f} MiB/s), partitioned by topic and date")
    return 0


def run_find(args) -> int:
    from pipelines.find import Criteria, find
    from pipelines.spark import is_single_machine

    if args.limit < 0:
        raise CliError(f"--limit {args.limit} must be 0 or more")
    try:
        criteria = Criteria(args.topic, args.key, args.begin, args.end)
    except StoreError as e:
        raise CliError(f"find: {e}", USAGE) from None
    stores = _stores(args, "find")
    scratch = None
    if args.out is not None:
        out = _output(args.out)
    elif is_single_machine(args.master):
        scratch = Path(tempfile.mkdtemp(prefix="rmqstore-find-"))
        out = scratch / "matches"
    else:
        raise CliError("find on a cluster needs --out: a directory every executor sees")
    try:
        with _job(args, "find", stores, {"the parent of --out": out.parent}) as spark:
            result = find(spark, stores, criteria, out, split_bytes=args.split_mib * MIB,
                          check_crc=not args.no_crc)
        _warn(result.corruptions, result.notes)
        printed = 0
        for m in result.read(args.limit):
            printed += 1
            if args.json:
                print(json.dumps(m, ensure_ascii=False))
            else:
                broker = f"{m['broker']}\t" if "broker" in m else ""
                print(f"{broker}{m['phyOffset']}\t{m['topic']}/{m['queueId']}@{m['queueOffset']}\t"
                      f"{m['storeTimestamp']}\t{m['msgId']}\tuniqKey={m['uniqKey']}\t"
                      f"keys={m['keys']}\ttags={m['tags']}")
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    kept = f"; all of them in {out}" if scratch is None else (
        "; --out DIR keeps them all" if printed < result.matches else "")
    print(f"{result.matches} of {result.records_scanned} records match, {printed} printed{kept}",
          file=sys.stderr)
    return 0 if result.matches else NOT_FOUND
