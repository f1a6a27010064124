"""Bad input to every client command, against real services: one line ``error: ...`` on
stderr, no traceback, the documented exit code (0 ok, 1 not found / partial, 2 usage or
input error, 3 server unavailable), and nothing written to the store by any of them."""

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2, query_pb2, query_pb2_grpc
from tests import procs

pytestmark = pytest.mark.integration

LINES = {
    "malformed.jsonl": '{"topic": "A", "body": "ok"}\n{"topic": \n',
    "no-topic.jsonl": '{"body": "x"}\n',
    "bad-base64.jsonl": '{"topic": "A", "bodyB64": "@@not base64@@"}\n',
    "queue-not-int.jsonl": '{"topic": "A", "queueId": "three"}\n',
    "queue-float.jsonl": '{"topic": "A", "queueId": 1.5}\n',
    "queue-huge.jsonl": '{"topic": "A", "queueId": 99999999999}\n',
    "born-time.jsonl": '{"topic": "A", "bornTimestamp": "yesterday"}\n',
    "not-object.jsonl": '["topic", "A"]\n',
    "not-utf8.jsonl": b'{"topic": "A", "body": "\xff\xfe"}\n',
    "properties-list.jsonl": '{"topic": "A", "properties": ["a"]}\n',
    "tx-forward.jsonl": '{"topic": "A", "preparedTxOfMsg": 3}\n',
}

# (case, arguments, exit code, words the error line holds); {w} writer, {q} query service,
# {d} a directory of input files, {cq} the consume-queue builder (serves neither API),
# {m} the writer's metrics (HTTP), {down} a port nobody listens on
CASES = [
    ("file missing", "put --commitlog {w} --file {d}/absent.jsonl", 2, "cannot read it"),
    ("file is a directory", "put --commitlog {w} --file {d}", 2, "is a directory"),
    ("malformed JSON", "put --commitlog {w} --file {d}/malformed.jsonl", 2, "line 2: not JSON"),
    ("line without topic", "put --commitlog {w} --file {d}/no-topic.jsonl", 2, 'no "topic"'),
    ("bad base64", "put --commitlog {w} --file {d}/bad-base64.jsonl", 2, "not base64"),
    ("non-integer queueId", "put --commitlog {w} --file {d}/queue-not-int.jsonl", 2,
     '"queueId" must be an integer'),
    ("float queueId", "put --commitlog {w} --file {d}/queue-float.jsonl", 2, "integer"),
    ("queueId past int32", "put --commitlog {w} --file {d}/queue-huge.jsonl", 2,
     "outside 0..2147483647"),
    ("bad born time", "put --commitlog {w} --file {d}/born-time.jsonl", 2,
     "\"bornTimestamp\" 'yesterday' is not epoch milliseconds"),
    ("non-object line", "put --commitlog {w} --file {d}/not-object.jsonl", 2, "JSON object"),
    ("not UTF-8", "put --commitlog {w} --file {d}/not-utf8.jsonl", 2, "not UTF-8"),
    ("properties not an object", "put --commitlog {w} --file {d}/properties-list.jsonl", 2,
     '"properties" must be an object'),
    ("transaction reference ahead", "put --commitlog {w} --file {d}/tx-forward.jsonl", 2,
     "preparedTxOfMsg 3 does not name an earlier message"),
    ("body file missing", "put --commitlog {w} --topic A --body-file {d}/absent", 2,
     "cannot read it"),
    ("body file is a directory", "put --commitlog {w} --topic A --body-file {d}", 2,
     "is a directory"),
    ("huge body", "put --commitlog {w} --topic A --body-file {d}/huge.bin", 2,
     "one request carries at most 33,554,432 bytes"),
    ("body over the writer's limit", "put --commitlog {w} --topic A --body-size 5000000", 2,
     "INVALID_ARGUMENT"),
    ("queues 0", "put --commitlog {w} --topic A --count 5 --queues 0", 2, "--queues: 0 is"),
    ("queue past int32", "put --commitlog {w} --topic A --queue 99999999999", 2,
     "--queue: 99999999999 is outside 0..2147483647"),
    ("queue not served", "put --commitlog {w} --topic A --queue 99", 2, "INVALID_ARGUMENT"),
    ("bad topic", "put --commitlog {w} --topic ../etc --body x", 2, "INVALID_ARGUMENT"),
    ("count 0", "put --commitlog {w} --topic A --count 0", 2, "--count: 0 is outside"),
    ("no topic", "put --commitlog {w} --body x", 2, "--topic (or --file) is required"),
    ("file with topic", "put --commitlog {w} --file {d}/no-topic.jsonl --topic A", 2,
     "not with --topic"),
    ("port 99999", "put --commitlog 127.0.0.1:99999 --topic A --body x", 2,
     "port 99999 of '127.0.0.1:99999' is outside 1..65535"),
    ("address without port", "query-id --query localhost 0A", 2, "is not HOST:PORT"),
    ("tls-ca not a certificate", "put --commitlog {w} --topic A --tls-ca /etc/passwd", 2,
     "--tls-ca /etc/passwd: not a PEM file"),
    ("tls-ca a directory", "pull --query {q} --topic A --queue 0 --offset 0 --tls-ca {d}", 2,
     "--tls-ca"),
    ("tls-cert without key", "put --commitlog {w} --topic A --tls-cert /etc/passwd", 2,
     "--tls-cert and --tls-key go together"),
    ("query-key max past int32", "query-key --query {q} --topic A --key k --max 99999999999",
     2, "--max: 99999999999 is outside"),
    ("query-key bad time", "query-key --query {q} --topic A --key k --begin yesterday", 2,
     "is not epoch milliseconds, ISO-8601"),
    ("query-key time without zone",
     "query-key --query {q} --topic A --key k --begin 2026-11-26T10:00:00", 2, "no time zone"),
    ("query-key end before begin",
     "query-key --query {q} --topic A --key k --begin 2000 --end 1000", 2, "is before --begin"),
    ("pull offset past int64",
     "pull --query {q} --topic A --queue 0 --offset 9223372036854775808", 2,
     "--offset: 9223372036854775808 is outside 0..9223372036854775807"),
    ("pull negative offset", "pull --query {q} --topic A --queue 0 --offset=-1", 2,
     "--offset: -1 is outside"),
    ("pull queue not a number", "pull --query {q} --topic A --queue x --offset 0", 2,
     "'x' is not an integer"),
    ("offset-by-time past year 9999",
     "offset-by-time --query {q} --topic A --queue 0 --time 99999999999999999999", 2,
     "outside 1970-01-01 .. 9999-12-31"),
    ("timeout 0", "query-id --query {q} 0A --timeout 0", 2, "--timeout"),
    ("writer address for a query", "query-key --query {w} --topic A --key k", 2,
     "does not serve the Query API: give --query the address of the query service"),
    ("query address for a put", "put --commitlog {q} --topic A --body x", 2,
     "does not serve the CommitLog API: give --commitlog the address of the writer"),
    ("builder address for a query", "pull --query {cq} --topic A --queue 0 --offset 0", 2,
     "does not serve the Query API"),
    ("metrics port for a query", "query-key --query {m} --topic A --key k", 2,
     "is not a gRPC server"),
    ("malformed message id", "query-id --query {q} not-an-id", 2, "INVALID_ARGUMENT"),
    ("unknown command", "frobnicate", 2, "invalid choice: 'frobnicate'"),
    ("unknown flag", "pull --query {q} --topic A --queue 0 --offset 0 --colour", 2,
     "unrecognized arguments: --colour"),
    ("inspect missing path", "inspect {d}/absent", 2, "does not exist"),
    ("inspect a directory not a store", "inspect {d}", 2, "is a directory but not a store"),
    ("inspect bad limit", "inspect {d} --limit x", 2, "'x' is not an integer"),
    # nothing found: 1, whichever command
    ("query-key finds nothing", "query-key --query {q} --topic Known --key absent", 1, None),
    ("query-id finds nothing", "query-id --query {q} 7F0000010000000000000000DEADBEEF", 1,
     None),
    ("pull past the end", "pull --query {q} --topic Known --queue 0 --offset 5", 1, None),
    ("pull of an unknown topic", "pull --query {q} --topic Unknown --queue 0 --offset 0", 1,
     None),
    ("query-key of an unknown topic", "query-key --query {q} --topic Unknown --key k", 1,
     "NOT_FOUND"),
    # a server that cannot be reached: 3
    ("writer down", "put --commitlog {down} --topic A --body x", 3, "UNAVAILABLE"),
    ("query service down", "query-key --query {down} --topic A --key k --timeout 5", 3,
     "UNAVAILABLE"),
    ("load generator, writer down", "put --commitlog {down} --topic A --count 50", 3,
     "0 of 50 messages were stored"),
]


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A writer, a consume-queue builder and a query service on one store; one message of
    topic ``Known`` stored and built."""
    tmp = tmp_path_factory.mktemp("bad-input")
    store = tmp / "store"
    started: list[procs.ServiceProcess] = []
    try:
        metrics = procs.free_port()
        writer = procs.start("services.commitlog", "--store", str(store), "--listen",
                             "127.0.0.1:0", "--commitlog-segment-size", str(1 << 20),
                             "--metrics-port", str(metrics))  # fmt: skip
        started.append(writer)
        common = ["--store", str(store), "--commitlog", writer.address, "--listen",
                  "127.0.0.1:0", "--flush-interval-ms", "50"]  # fmt: skip
        cq = procs.start("services.indexer", "consume-queue", *common,
                         "--cq-entries-per-file", "1000")  # fmt: skip
        started.append(cq)
        query = procs.start("services.query", "--store", str(store), "--commitlog",
                            writer.address, "--listen", "127.0.0.1:0", "--index-slots", "100",
                            "--index-entries", "400")  # fmt: skip
        started.append(query)
        stub = commitlog_pb2_grpc.CommitLogStub(channel(writer.address))
        stub.Put(commitlog_pb2.PutRequest(message=common_pb2.Message(
            topic="Known", queue_id=0, body=b"x")))  # fmt: skip
        q = query_pb2_grpc.QueryStub(channel(query.address))
        _poll(lambda: q.QueueOffsets(query_pb2.QueueOffsetsRequest(
            topic="Known", queue_id=0)).max_offset == 1)  # fmt: skip
        inputs = tmp / "inputs"
        inputs.mkdir()
        for name, text in LINES.items():
            path = inputs / name
            path.write_bytes(text if isinstance(text, bytes) else text.encode())
        (inputs / "huge.bin").write_bytes(b"\0" * (40 << 20))
        yield {"w": writer.address, "q": query.address, "cq": cq.address, "d": str(inputs),
               "m": f"127.0.0.1:{metrics}",
               "down": f"127.0.0.1:{procs.free_port()}", "stub": stub}  # fmt: skip
    finally:
        for p in reversed(started):
            p.stop()


def _poll(cond, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if cond():
                return
        except Exception:  # noqa: BLE001 - not built yet
            pass
        assert time.monotonic() < deadline, "the consume-queue builder did not catch up"
        time.sleep(0.05)  # polling a condition


def rmqstore(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "services.cli.main", *args],
                          cwd=procs.ROOT, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


@pytest.fixture(scope="module")
def answers(node):
    """Every case run at once (each a process of its own); none may write to the store."""
    before = node["stub"].GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset
    with ThreadPoolExecutor(3) as pool:
        runs = pool.map(lambda c: rmqstore(*[p.format(**node) for p in c[1].split(" ")]), CASES)
        out = dict(zip((c[0] for c in CASES), runs, strict=True))
    assert node["stub"].GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset == before
    return out


@pytest.mark.parametrize(("case", "argv", "code", "words"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_with_its_exit_code(answers, case, argv, code, words):
    out = answers[case]
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode == code, (out.returncode, out.stderr)
    lines = out.stderr.splitlines()
    if code == 1 and words is None:  # nothing found: no error, an empty answer
        assert lines == [] and out.stdout
    else:
        assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
        assert words in lines[0], lines[0]


def test_help_is_not_an_error(node):
    out = rmqstore("put", "--help")
    assert out.returncode == 0 and "--resume-offset" in out.stdout and out.stderr == ""


def test_json_answers_keep_epoch_ms_and_text_shows_the_offset(node):
    text = rmqstore("pull", "--query", node["q"], "--topic", "Known", "--queue", "0",
                    "--offset", "0")  # fmt: skip
    assert text.returncode == 0, text.stderr
    stamp = text.stdout.split(" time=")[1].split(" ")[0]
    assert stamp[:2] == "20" and "T" in stamp and (stamp.endswith("Z") or "+" in stamp)
    js = rmqstore("pull", "--query", node["q"], "--topic", "Known", "--queue", "0",
                  "--offset", "0", "--json")  # fmt: skip
    assert isinstance(json.loads(js.stdout)["messages"][0]["storeTimestamp"], int)


def test_every_time_flag_takes_iso_and_relative_times(node):
    for flags in (["--begin", "-1h", "--end", "now"],
                  ["--begin", "2020-01-01T00:00:00Z", "--end", "+1d"],
                  ["--begin", "1577836800000"]):  # fmt: skip
        out = rmqstore("query-key", "--query", node["q"], "--topic", "Known", "--key", "k",
                       *flags)  # fmt: skip
        assert out.returncode == 1 and out.stderr == "", out.stderr  # found nothing, no error
    out = rmqstore("offset-by-time", "--query", node["q"], "--topic", "Known", "--queue", "0",
                   "--time", "-15m", "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["offset"] == 0


def test_a_partial_put_file_reports_its_line(node, tmp_path):
    lines = [json.dumps({"topic": "Part", "body": f"m{i}"}) for i in range(5)]
    lines[3] = json.dumps({"topic": "Part", "body": "bad", "queueId": 99})
    path = Path(tmp_path / "part.jsonl")
    path.write_text("\n".join(lines) + "\n")
    out = rmqstore("put", "--commitlog", node["w"], "--file", str(path), "--json")
    assert out.returncode == 1, out.stderr  # partial
    stored = [json.loads(line) for line in out.stdout.splitlines()]
    assert [s["line"] for s in stored] == [1, 2, 3]
    (err,) = out.stderr.splitlines()
    assert err.startswith(f"error: line 4 of {path} was not stored: INVALID_ARGUMENT")
    assert "3 messages before it are stored (through line 3" in err
    assert err.endswith(f"--file {path} --json --skip 3"), err
