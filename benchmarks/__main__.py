"""``make bench``: run every ``benchmarks/bench_*.py`` and print one Markdown table each.

``python -m benchmarks [--quick | --smoke] [--results DIR] [NAME ...]``; results also go to
``DIR/NAME.json`` (benchmarks/results by default). Exits with 1 when a scenario failed.

This VM's speed changes by the hour, so the machine's speed (``benchmarks.machine``) is read
before each benchmark and after the last, and printed last as its own table
(``DIR/machine.json``).
"""

import argparse
import importlib
import json
import platform
import sys
import time
from pathlib import Path

from benchmarks import machine
from benchmarks.scale import Scale

HERE = Path(__file__).parent


def table(rows: list[dict]) -> str:
    if not rows:
        return "(no rows)"
    cols = list(dict.fromkeys(k for r in rows for k in r))

    def fmt(v: object) -> str:
        if isinstance(v, float):
            return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
        return str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="scale", action="store_const", const=Scale.QUICK,
                      default=Scale.FULL, help="about a tenth of the sizes, to try a change")
    size.add_argument("--smoke", dest="scale", action="store_const", const=Scale.SMOKE,
                      help="the smallest sizes that run every scenario (figures mean nothing)")
    p.add_argument("--results", type=Path, default=HERE / "results",
                   help="where NAME.json goes (default: %(default)s)")
    p.add_argument("names", nargs="*", help="e.g. put builders query rebuild")
    args = p.parse_args()
    names = args.names or sorted(f.stem[6:] for f in HERE.glob("bench_*.py"))
    args.results.mkdir(parents=True, exist_ok=True)
    print(
        f"machine: {platform.machine()}, {platform.processor() or '?'}, "
        f"python {platform.python_version()}, {__import__('os').cpu_count()} cores"
    )
    failed = 0
    speeds: list[dict] = []
    for name in names:
        speeds.append({"scenario": f"before {name}", **machine.measure(args.scale)})
        mod = importlib.import_module(f"benchmarks.bench_{name}")
        t0 = time.time()
        try:
            rows = mod.run(args.scale)
        except Exception as e:  # keep going: one broken scenario must not hide the others
            print(f"\n## {name}: FAILED: {e!r}", flush=True)
            failed += 1
            continue
        print(f"\n## {name} ({time.time() - t0:.0f}s)\n\n{table(rows)}", flush=True)
        (args.results / f"{name}.json").write_text(json.dumps(rows, indent=1))
    speeds.append({"scenario": "after the last", **machine.measure(args.scale)})
    print(f"\n## machine speed\n\n{table(speeds)}", flush=True)
    (args.results / "machine.json").write_text(json.dumps(speeds, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
