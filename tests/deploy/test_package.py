"""The package works outside the source tree: the wheel, installed in a fresh virtualenv,
passes the image's own install check and serves a store from a directory outside the
repository, where a put and a query go through its ``rmqstore`` command."""

import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests import procs
from tests.deploy.conftest import ROOT

pytestmark = pytest.mark.integration
CHECK = ROOT / "deploy" / "check_install.py"
SERVE_DEADLINE_S = 90.0
PORTS = 19  # serve: N..N+8 (HA N+6, remoting N+7, name server N+8), metrics N+10..N+18


def _run(args: list, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of this tree's packages (with the protos ``make``
    generated): building in the tree would leave a build/ directory whose stale files a later
    build packs too."""
    tmp = tmp_path_factory.mktemp("dist")
    source = tmp / "source"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for package in ("rmqstore", "services", "pipelines"):
        shutil.copytree(ROOT / package, source / package, ignore=skip)
    shutil.copy(ROOT / "pyproject.toml", source)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "--disable-pip-version-check", "-q", "-w", tmp / "dist", source], cwd=tmp)
    (built,) = (tmp / "dist").glob("rmqstore-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory) -> Path:
    """A fresh virtualenv with the wheel (its dependencies from the package index or pip's
    cache); its bin directory."""
    venv = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", venv], cwd=venv)
    _run([venv / "bin" / "python", "-m", "pip", "install", "--disable-pip-version-check",
          "-q", wheel], cwd=venv)
    return venv / "bin"


def test_wheel_holds_the_generated_protos_and_every_package(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    for proto in (ROOT / "protos" / "rmqstore" / "v1").glob("*.proto"):
        assert f"rmqstore/v1/{proto.stem}_pb2.py" in names
        assert f"rmqstore/v1/{proto.stem}_pb2_grpc.py" in names
    for package in ("rmqstore", "services", "pipelines"):
        source = {str(p.relative_to(ROOT)) for p in (ROOT / package).rglob("*.py")}
        assert source <= names, sorted(source - names)


def test_installed_package_passes_the_image_check(installed: Path, tmp_path: Path):
    done = _run([installed / "python", CHECK], cwd=tmp_path)
    assert "modules installed in" in done.stdout


def _free_port_base() -> int:
    """A base N with N..N+18 free on loopback now (serve binds them a moment later)."""
    return procs.free_port_base(range(PORTS))


def test_serve_put_and_query_from_outside_the_tree(installed: Path, tmp_path: Path):
    work = tmp_path / "elsewhere"
    work.mkdir()
    assert ROOT not in work.parents
    base = _free_port_base()
    log = work / "serve.log"
    with log.open("wb") as out:
        serve = subprocess.Popen(
            [str(installed / "rmqstore"), "serve", "--store", "store", "--port-base", str(base),
             "--commitlog-segment-size", str(1 << 20), "--index-slots", "1000",
             "--index-entries", "4000", "--cq-entries-per-file", "100"],
            cwd=work, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + SERVE_DEADLINE_S
        while "serving" not in log.read_text():
            assert serve.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)  # polling the log for a condition, with a deadline
        rmqstore = str(installed / "rmqstore")
        _run([rmqstore, "put", "--commitlog", f"127.0.0.1:{base}", "--topic", "Orders",
              "--keys", "order-42", "--body", "hello"], cwd=work, timeout=60)
        found = ""
        while "hello" not in found:  # the index builder catches up
            assert time.monotonic() < deadline, found
            done = subprocess.run([rmqstore, "query-key", "--query", f"127.0.0.1:{base + 1}",
                                   "--topic", "Orders", "--key", "order-42", "--json"],
                                  cwd=work, capture_output=True, text=True, timeout=60,
                                  check=False)
            found = done.stdout
        assert (work / "store" / "commitlog").is_dir()
    finally:
        serve.send_signal(signal.SIGINT)
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait(timeout=30)
    assert serve.returncode == 0, log.read_text()
    shutil.rmtree(work / "store")
