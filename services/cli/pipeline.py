"""``rmqstore rebuild | export | find``: the Spark pipeline over commitlog segments.

Local Spark is the default (``--master local[*]``); any Spark master URL works when every
executor sees the store and output paths and has rmqstore installed.
"""

import argparse
import json
import sys

from rmqstore.errors import StoreError

MIB = 1024 * 1024


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", required=True,
                   help="store root (holding commitlog/) or a commitlog directory")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--split-mib", type=int, default=64,
                   help="cut segments larger than this into ranges of about this size")
    p.add_argument("--no-crc", action="store_true", help="skip body CRC checks")


def register(subparsers) -> None:
    p = subparsers.add_parser("rebuild", help="rebuild consume queues and index files on Spark")
    _common(p)
    p.add_argument("--out", required=True,
                   help="output root: a new directory, or an existing one without "
                        "consumequeue/ and index/ (the store root itself, say)")
    p.add_argument("--replace", action="store_true",
                   help="replace consumequeue/ and index/ already in --out")
    p.add_argument("--index-slots", type=int, default=None)
    p.add_argument("--index-entries", type=int, default=None)
    p.add_argument("--cq-entries-per-file", type=int, default=None)
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
    p.add_argument("--json", action="store_true", help="one JSON document per message")
    p.set_defaults(run=run_find)


def _fail(e: StoreError) -> int:
    print(f"rmqstore: {e.grpc_status}: {e}", file=sys.stderr)
    return 2


def _job_failed(what: str, e: Exception) -> int:
    """A Spark job that failed in a task: name the task's own error, not the JVM trace."""
    lines = [ln.strip() for ln in str(e).splitlines()]
    cause = next((ln for ln in reversed(lines) if ln.startswith("rmqstore.errors.")), None)
    cause = cause or next((ln for ln in lines if ln), type(e).__name__)
    print(f"rmqstore: {what} failed, nothing was written: {cause}", file=sys.stderr)
    return 1


def _warn(corruptions, notes) -> None:
    for c in corruptions:
        print(f"warning: {c}; the data read stops there", file=sys.stderr)
    for n in notes:
        print(f"warning: {n}", file=sys.stderr)


def run_rebuild(args) -> int:
    from pipelines.rebuild.job import RebuildSettings, rebuild
    from pipelines.spark import SessionScope

    try:
        defaults = RebuildSettings()
        settings = RebuildSettings(
            index_slots=args.index_slots or defaults.index_slots,
            index_entries=args.index_entries or defaults.index_entries,
            cq_entries_per_file=args.cq_entries_per_file or defaults.cq_entries_per_file,
            split_bytes=args.split_mib * MIB, check_crc=not args.no_crc,
        )
        with SessionScope(args.master, app_name="rmqstore-rebuild") as spark:
            report = rebuild(spark, args.store, args.out, settings, replace=args.replace,
                             progress=not args.quiet)
    except StoreError as e:
        return _fail(e)
    except Exception as e:  # a task failed: Spark re-raises it wrapped
        return _job_failed("rebuild", e)
    _warn(report.corruptions, report.notes)
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        print(f"rebuilt {args.out}: {report.records} records, {report.bytes} bytes of "
              f"commitlog in {report.seconds:.1f} s ({report.mib_per_s:.1f} MiB/s); "
              f"{report.cq_files} consume-queue files ({report.queues} queues, "
              f"{report.cq_units} units), {len(report.index_files)} index files "
              f"({report.index_keys} keys)")
    return 0


def run_export(args) -> int:
    from pipelines.export import export
    from pipelines.spark import SessionScope

    try:
        with SessionScope(args.master, app_name="rmqstore-export") as spark:
            report = export(spark, args.store, args.out, split_bytes=args.split_mib * MIB,
                            check_crc=not args.no_crc, progress=not args.quiet)
    except StoreError as e:
        return _fail(e)
    except Exception as e:  # a task failed: Spark re-raises it wrapped
        return _job_failed("export", e)
    _warn(report.corruptions, report.notes)
    if args.json:
        print(json.dumps(report.to_dict()))
        return 0
    print(f"exported {report.records} records ({report.bytes} bytes of commitlog) to "
          f"{args.out} in {report.seconds:.1f} s ({report.mib_per_s:.1f} MiB/s), partitioned "
          "by topic and date")
    return 0


def run_find(args) -> int:
    from pipelines.find import Criteria, find
    from pipelines.spark import SessionScope

    try:
        criteria = Criteria(args.topic, args.key, args.begin, args.end)
        with SessionScope(args.master, app_name="rmqstore-find") as spark:
            result = find(spark, args.store, criteria, split_bytes=args.split_mib * MIB,
                          check_crc=not args.no_crc)
    except StoreError as e:
        return _fail(e)
    _warn(result.corruptions, result.notes)
    for m in result.matches:
        if args.json:
            print(json.dumps(m, ensure_ascii=False))
        else:
            print(f"{m['phyOffset']}\t{m['topic']}/{m['queueId']}@{m['queueOffset']}\t"
                  f"{m['storeTimestamp']}\t{m['msgId']}\tuniqKey={m['uniqKey']}\t"
                  f"keys={m['keys']}\ttags={m['tags']}")
    print(f"{len(result.matches)} of {result.records_scanned} records match", file=sys.stderr)
    return 0
