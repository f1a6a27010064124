"""``rmqstore serve`` starts every service on one store and stops them all on SIGTERM."""

import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import pytest

from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2
from tests import procs
from tests.ha_peer import PeerSlave

pytestmark = pytest.mark.integration


def _free_base() -> int:
    return procs.free_port_base((0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 17, 18))


def test_serve_runs_everything_and_stops_cleanly(tmp_path):
    base = _free_base()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.cli.main",
            "serve",
            "--store",
            str(tmp_path / "s"),
            "--port-base",
            str(base),
            "--commitlog-segment-size",
            str(1 << 20),
            "--index-slots",
            "1000",
            "--index-entries",
            "4000",
            "--cq-entries-per-file",
            "100",
        ],
        cwd=procs.ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    ready = threading.Event()

    def pump():
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("serving"):
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert ready.wait(60), "".join(lines)
        out = "".join(lines)
        assert re.search(rf"commitlog\s+grpc 127\.0\.0\.1:{base}\b", out), out
        assert re.search(rf"proxy\s+grpc 127\.0\.0\.1:{base + 4}\b", out), out
        assert re.search(rf"namesrv\s+remoting 127\.0\.0\.1:{base + 8}\b", out), out
        stub = commitlog_pb2_grpc.CommitLogStub(channel(f"127.0.0.1:{base}"))
        r = stub.Put(
            commitlog_pb2.PutRequest(message=common_pb2.Message(topic="T", body=b"hi", keys="k1"))
        )
        assert r.phy_offset == 0
        ha = rf"replication\s+async_master, slaves connect to 127\.0\.0\.1:{base + 6}\b"
        assert re.search(ha, out), out
        slave = PeerSlave("127.0.0.1", base + 6)  # the HA port follows the port base
        try:
            slave.run_until(r.size, timeout=30)
        finally:
            slave.close()
        assert re.search(rf"console\s+http://127\.0\.0\.1:{base + 5}/", out), out
        with urllib.request.urlopen(f"http://127.0.0.1:{base + 5}/api/v1/store", timeout=30) as h:
            assert json.load(h)["commitlog"]["maxOffset"] == r.size
    finally:
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    assert proc.returncode == 0, "".join(lines)
    assert "stopped" in "".join(lines)
    assert not (tmp_path / "s" / "abort").exists()  # the writer shut down cleanly


def test_serve_passes_the_writer_options_on():
    from services.cli.main import build_parser
    from services.cli.serve_services import SERVICES, command

    args = build_parser().parse_args(
        ["serve", "--flush", "sync", "--dispatch-linger-ms", "0", "--queues-per-topic", "4",
         "--role", "sync_master", "--slave-timeout", "1.5"]
    )  # fmt: skip
    cmd = command(SERVICES[0], args, {"commitlog": 9000})
    options = dict(zip(cmd[3::2], cmd[4::2], strict=False))
    assert options["--flush"] == "sync"
    assert options["--dispatch-linger-ms"] == "0.0"
    assert options["--queues-per-topic"] == "4"
    assert options["--listen"] == "127.0.0.1:9000"
    assert (options["--role"], options["--ha-port"], options["--slave-timeout"]) == (
        "sync_master", "8106", "1.5")  # fmt: skip


def test_serve_gives_the_writer_its_topics_file_as_an_absolute_path(tmp_path, monkeypatch):
    """``serve --topics-file`` reaches the writer (which creates the topics,
    ``test_declared_topics``), resolved against serve's directory."""
    from services.cli.main import build_parser
    from services.cli.serve_services import SERVICES, command

    monkeypatch.chdir(tmp_path)
    with_file = build_parser().parse_args(["serve", "--topics-file", "conf/topics.json"])
    cmd = command(SERVICES[0], with_file, {"commitlog": 9000})
    assert cmd[cmd.index("--topics-file") + 1] == str(tmp_path / "conf" / "topics.json")
    without = command(SERVICES[0], build_parser().parse_args(["serve"]), {"commitlog": 9000})
    assert "--topics-file" not in without


def test_serve_starts_the_console_only_on_loopback():
    from services.cli.serve_services import _loopback

    assert _loopback("127.0.0.1") and _loopback("::1") and _loopback("localhost")
    assert not _loopback("0.0.0.0") and not _loopback("10.1.2.3")


def test_serve_gives_the_console_the_proxy_unless_read_only():
    from services.cli.main import build_parser
    from services.cli.serve_services import SERVICES, command

    (console,) = [s for s in SERVICES if s.name == "console"]
    ports = {s.name: 9000 + s.slot for s in SERVICES}
    for extra, proxy in (([], "127.0.0.1:9004"), (["--read-only"], None)):
        cmd = command(console, build_parser().parse_args(["serve", *extra]), ports)
        options = dict(zip(cmd[3::2], cmd[4::2], strict=False))
        assert options.get("--proxy") == proxy and options["--query"] == "127.0.0.1:9001"


@pytest.fixture
def short_tmp():
    """A directory with a short path (a Unix socket's path is limited to ~107 bytes)."""
    d = tempfile.mkdtemp(prefix="rs-")
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


def test_the_socket_directories_of_killed_serves_are_removed(short_tmp):
    from services.cli.serve import SOCKETS, STALE_AFTER_S, socket_dir


    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid no process has now

    def made(name: str, age_s: float = 2 * STALE_AFTER_S) -> pathlib.Path:
        d = short_tmp / name
        d.mkdir()
        (d / "writer.sock").touch()  # nothing listens on it
        os.utime(d, (time.time() - age_s,) * 2)
        return d

    left = made(f"{SOCKETS}{gone.pid}-abc")
    young = made(f"{SOCKETS}{gone.pid}-def", age_s=1)  # a serve starting
    live = made(f"{SOCKETS}1-abc")  # pid 1 lives
    other = made(f"{SOCKETS}x-abc")  # not ours
    served = short_tmp / f"{SOCKETS}{gone.pid}-ghi"  # another pid namespace's live serve
    served.mkdir()
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(served / "writer.sock"))
    listening.listen()
    os.utime(served, (time.time() - 2 * STALE_AFTER_S,) * 2)
    try:
        mine = socket_dir(str(short_tmp))
    finally:
        listening.close()
    assert not left.exists()
    assert young.exists() and live.exists() and other.exists() and served.exists()
    assert mine.startswith(str(short_tmp / f"{SOCKETS}{os.getpid()}-"))
    assert socket_dir(str(short_tmp)) != mine and os.path.isdir(mine)  # its own is kept


def test_serve_gives_the_writer_and_the_proxy_one_put_socket():
    from services.cli.main import build_parser
    from services.cli.serve_services import SERVICES, command

    ports = {s.name: 9000 + s.slot for s in SERVICES}
    (proxy,) = [s for s in SERVICES if s.name == "proxy"]
    args = build_parser().parse_args(["serve"])
    args.put_socket = "/tmp/x/writer.sock"  # what run() makes
    writer_cmd, proxy_cmd = command(SERVICES[0], args, ports), command(proxy, args, ports)
    assert writer_cmd[writer_cmd.index("--put-socket") + 1] == args.put_socket
    assert proxy_cmd[proxy_cmd.index("--commitlog-socket") + 1] == args.put_socket
    assert not build_parser().parse_args(["serve", "--no-put-socket"]).put_socket_on
    args.put_socket = ""  # --no-put-socket or --read-only: puts over gRPC
    assert "--put-socket" not in command(SERVICES[0], args, ports)
    assert "--commitlog-socket" not in command(proxy, args, ports)


def test_serve_gives_the_remoting_broker_the_access_key_and_acl_unless_unsigned():
    from services.cli.main import build_parser
    from services.cli.serve_services import SERVICES, command

    (remoting,) = [s for s in SERVICES if s.name == "remoting"]
    ports = {s.name: 9000 + s.slot for s in SERVICES}
    keys = ["--access-key", "AK", "--secret-key-file", "/run/sk"]
    for extra, acl in ((keys, True), ([*keys, "--remoting-unsigned"], False), ([], False)):
        cmd = command(remoting, build_parser().parse_args(["serve", *extra]), ports)
        assert ("--acl" in cmd) is acl
        assert cmd.count("--proxy") == 1 and cmd.count("--access-key") == (1 if extra else 0)
        if extra:
            assert cmd[cmd.index("--secret-key-file") + 1] == "/run/sk"


def test_serve_gives_the_remoting_broker_its_acl_file_with_or_without_an_access_key(tmp_path):
    from services.cli.main import build_parser
    from services.cli.serve_services import SERVICES, command

    (remoting,) = [s for s in SERVICES if s.name == "remoting"]
    ports = {s.name: 9000 + s.slot for s in SERVICES}
    keys = ["--access-key", "AK", "--secret-key-file", "/run/sk"]
    for extra in ([], keys):
        args = build_parser().parse_args(["serve", "--acl-file", "acl/plain_acl.yml", *extra])
        cmd = command(remoting, args, ports)
        assert cmd.count("--acl-file") == 1
        given = cmd[cmd.index("--acl-file") + 1]
        assert given.endswith("/acl/plain_acl.yml") and given.startswith("/")  # absolute
        assert ("--acl" in cmd) is bool(extra)  # the file alone turns the check on


@pytest.mark.parametrize(
    ("content", "extra", "words"),
    [
        ("accounts:\n  - {accessKey: abc, secretKey: 12345678}\n", [],
         "accounts[0]: accessKey and secretKey must be more than 6 characters"),
        (None, [], "No such file"),
        ("accounts: []\n", ["--access-key", "AK", "--remoting-unsigned"],
         "--remoting-unsigned and --acl-file go against each other"),
    ],
)  # fmt: skip
def test_serve_refuses_an_acl_file_it_cannot_apply_before_starting_anything(
    tmp_path, content, extra, words
):
    acl = tmp_path / "plain_acl.yml"
    if content is not None:
        acl.write_text(content)
    env = {**os.environ, "RMQSTORE_SECRET_KEY": "s3cret"}
    argv = ["serve", "--store", str(tmp_path / "store"), "--acl-file", str(acl), *extra]
    r = subprocess.run([sys.executable, "-m", "services.cli.main", *argv], cwd=procs.ROOT,
                       capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and words in lines[0], r.stderr
    assert not (tmp_path / "store").exists()
