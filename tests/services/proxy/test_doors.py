"""Every door of the proxy's port locked by the access key: ``ConsumerGroups`` as well as
``MessagingService``; a signature only for the time it was made at (no replays); the secret
in no process's command line under ``rmqstore serve``; and the commands and the console that
call the proxy sign their calls."""

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from rmqstore.access_keys import format_date, sign
from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.rocketmq import service_pb2 as spb
from rmqstore.rocketmq import service_pb2_grpc
from rmqstore.server import channel
from rmqstore.v1 import groups_pb2, groups_pb2_grpc, topics_pb2, topics_pb2_grpc
from tests import procs
from tests.services.proxy.conftest import Serve

pytestmark = pytest.mark.integration
SECRET = "s3cret-Not-In-Argv-7f1c"
MD = (("x-mq-client-id", "test@1@0@doors"), ("x-mq-language", "PYTHON"))


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "services.cli.main", *args], cwd=procs.ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})  # fmt: skip


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("doors")
    secret = tmp / "secret"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    s = Serve(tmp / "store", "--access-key", "AK", "--secret-key-file", str(secret))
    try:
        r = cli("put", "--commitlog", s.address(0), "--topic", "DoorT", "--queues", "2",
                "--count", "4", "--body", "body-{i}")  # fmt: skip
        assert r.returncode == 0, r.stderr
        yield s, secret
    finally:
        assert s.stop() == 0, "".join(s.lines[-50:])


def signed(date: str | None = None, secret: str = SECRET) -> tuple[tuple[str, str], ...]:
    date = format_date(time.time()) if date is None else date
    return (("x-mq-date-time", date), ("authorization", sign("AK", secret, date)))


def _groups(s: Serve) -> groups_pb2_grpc.ConsumerGroupsStub:
    return groups_pb2_grpc.ConsumerGroupsStub(channel(s.proxy))


def _topic_exists(s: Serve, name: str) -> bool:
    stub = topics_pb2_grpc.TopicsStub(channel(s.address(0)))
    try:
        stub.GetTopic(topics_pb2.GetTopicRequest(name=name), timeout=10)
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.NOT_FOUND
        return False
    return True


GROUP_CALLS = [
    ("ListGroups", groups_pb2.ListGroupsRequest()),
    ("DescribeGroup", groups_pb2.DescribeGroupRequest(group="Anyone")),
    ("ResetGroup", groups_pb2.ResetGroupRequest(group="Evil", topic="EvilNewTopic", offset=0)),
]


@pytest.mark.parametrize("md", [(), signed(secret="wrong"), signed(date="")],
                         ids=["unsigned", "wrong secret", "empty date"])  # fmt: skip
def test_consumer_groups_refuse_calls_not_signed_with_the_key(secured, md):
    s, _ = secured
    stub = _groups(s)
    for rpc, request in GROUP_CALLS:
        with pytest.raises(grpc.RpcError) as e:
            getattr(stub, rpc)(request, metadata=md, timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, rpc
    assert not _topic_exists(s, "EvilNewTopic")  # ResetGroup created nothing
    listed = stub.ListGroups(groups_pb2.ListGroupsRequest(), metadata=signed(), timeout=10)
    assert "Evil" not in [g.name for g in listed.groups]


def _heartbeat(s: Serve, md) -> pb.Status:
    stub = service_pb2_grpc.MessagingServiceStub(channel(s.proxy))
    return stub.Heartbeat(spb.HeartbeatRequest(), metadata=(*MD, *md), timeout=10).status


def test_a_signature_counts_only_near_the_time_it_was_made(secured):
    s, _ = secured
    assert _heartbeat(s, signed()).code == pb.OK
    # a valid signature over no date, or a captured one replayed an hour later, is refused,
    # and the refusal says which
    missing = ((("authorization", sign("AK", SECRET, "")),))
    st = _heartbeat(s, missing)
    assert st.code == pb.UNAUTHORIZED and "x-mq-date-time header is missing" in st.message
    hour_ago = format_date(time.time() - 3600)
    st = _heartbeat(s, signed(hour_ago))
    assert st.code == pb.UNAUTHORIZED and "behind the proxy's clock" in st.message
    assert "outside the 900 s window" in st.message
    st = _heartbeat(s, signed(format_date(time.time() + 3600)))
    assert st.code == pb.UNAUTHORIZED and "ahead of the proxy's clock" in st.message
    st = _heartbeat(s, signed("yesterday"))
    assert st.code == pb.UNAUTHORIZED and "is not yyyyMMdd'T'HHmmss'Z'" in st.message
    with pytest.raises(grpc.RpcError) as e:
        _groups(s).ListGroups(groups_pb2.ListGroupsRequest(), metadata=signed(hour_ago),
                              timeout=10)  # fmt: skip
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "window" in (e.value.details() or "")


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def test_no_process_under_serve_has_the_secret_in_its_arguments(secured):
    s, _ = secured
    commands = {}
    for pid in _descendants(s.proc.pid):
        try:
            commands[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
    assert any(b"services.proxy" in c for c in commands.values()), commands
    assert any(b"services.console" in c for c in commands.values()), commands
    assert not [c for c in commands.values() if SECRET.encode() in c]


def test_the_commands_sign_with_a_key_from_a_file_or_the_environment(secured):
    s, secret = secured
    unsigned = cli("group", "list", "--proxy", s.proxy)
    assert unsigned.returncode == 2 and "UNAUTHORIZED" not in unsigned.stderr
    assert "access key" in unsigned.stderr and "--secret-key-file" in unsigned.stderr
    r = cli("consume", "--proxy", s.proxy, "--group", "DoorG", "--topic", "DoorT", "--json",
            "--wait", "1", "--access-key", "AK", "--secret-key-file", str(secret))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sorted(json.loads(line)["body"] for line in r.stdout.splitlines()) == \
        [f"body-{i}" for i in range(4)]  # fmt: skip
    env = {"RMQSTORE_ACCESS_KEY": "AK", "RMQSTORE_SECRET_KEY": SECRET}
    d = cli("group", "describe", "DoorG", "--proxy", s.proxy, "--json", env=env)
    assert d.returncode == 0, d.stderr
    assert sum(q["committedOffset"] for q in json.loads(d.stdout)["queues"]) == 4
    no_secret = cli("group", "list", "--proxy", s.proxy, "--access-key", "AK",
                    env={"RMQSTORE_SECRET_KEY": ""})  # fmt: skip
    assert no_secret.returncode == 2 and "without a secret key" in no_secret.stderr
    on_argv = cli("group", "list", "--proxy", s.proxy, "--secret-key", SECRET)
    assert on_argv.returncode == 2 and "--secret-key-file" in on_argv.stderr


def test_the_console_under_serve_signs_its_calls_to_the_proxy(secured):
    s, _ = secured
    # unsigned, the proxy would refuse it: the page would be an error, not the groups
    with urllib.request.urlopen(f"http://{s.address(5)}/api/v1/groups", timeout=60) as r:
        assert r.status == 200
        assert "groups" in json.loads(r.read())


@pytest.mark.parametrize("from_file", [True, False], ids=["file", "environment"])
def test_serve_passes_the_secret_to_no_command_line(tmp_path, monkeypatch, from_file):
    from services.cli import serve as serve_cmd
    from services.cli import serve_services
    from services.cli.main import build_parser

    monkeypatch.setenv("RMQSTORE_SECRET_KEY", "" if from_file else SECRET)
    path = tmp_path / "secret"
    path.write_text(SECRET)
    argv = ["serve", "--store", str(tmp_path / "store"), "--access-key", "AK"]
    args = build_parser().parse_args(argv + (["--secret-key-file", str(path)] if from_file
                                             else []))  # fmt: skip
    args.put_socket = ""
    ports = serve_cmd._ports(args)
    commands = {s.name: serve_services.command(s, args, ports) for s in serve_cmd.SERVICES}
    assert not [c for c in commands.values() if any(SECRET in word for word in c)]
    for name in ("proxy", "console"):  # both sign or check with the key
        assert commands[name][commands[name].index("--access-key") + 1] == "AK"
