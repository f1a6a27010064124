"""Check an installed rmqstore: the image runs it after ``pip install``, the packaging test
against a wheel installed in a fresh virtualenv.

Every package (the generated gRPC code, the services, the pipeline jobs) must import from
this interpreter's site-packages, not from a source tree, and the ``rmqstore`` command must
run. ``--spark``: the pipeline jobs must import too (PySpark installed).

    python deploy/check_install.py [--spark]
"""

import importlib
import importlib.util
import subprocess
import sys
import sysconfig
from pathlib import Path

MODULES = [
    "rmqstore", "rmqstore.metrics", "rmqstore.formats.commitlog",
    "rmqstore.v1.common_pb2", "rmqstore.v1.commitlog_pb2", "rmqstore.v1.commitlog_pb2_grpc",
    "rmqstore.v1.indexer_pb2_grpc", "rmqstore.v1.query_pb2_grpc",
    "services.cli.main", "services.commitlog.engine", "services.indexer.index_builder",
    "services.query.app",
]
ENTRY_POINTS = ["services.commitlog.__main__", "services.indexer.__main__",
                "services.query.__main__"]  # found, not run
PIPELINE_MODULES = ["pipelines.rebuild.job", "pipelines.export", "pipelines.find",
                    "pipelines.spark"]


def main(argv: list[str]) -> int:
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    problems = []
    wanted = MODULES + (PIPELINE_MODULES if "--spark" in argv else [])
    for name in wanted:
        try:
            origin = importlib.import_module(name).__file__
        except ImportError as e:
            problems.append(f"{name}: {e}")
            continue
        if origin is None or site not in Path(origin).resolve().parents:
            problems.append(f"{name} comes from {origin}, not from {site}")
    for name in ENTRY_POINTS + [m for m in PIPELINE_MODULES if m not in wanted]:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None or site not in Path(spec.origin).parents:
            problems.append(f"{name} is not installed in {site}")
    command = Path(sys.executable).with_name("rmqstore")
    done = subprocess.run([str(command), "--help"], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0 or "rebuild" not in done.stdout:
        problems.append(f"{command} --help failed ({done.returncode}): {done.stderr.strip()}")
    for p in problems:
        print(f"check_install: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"check_install: {len(wanted) + len(ENTRY_POINTS)} modules installed in {site}; "
          f"{command.name} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
