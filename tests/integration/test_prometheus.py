"""A real Prometheus server scrapes rmqstore metrics endpoints on 127.0.0.1; values are read
back through its HTTP API, and the shipped alert rules are evaluated against them.

``prometheus_scraping(tmp_path, targets)`` is the reusable part: give it
``{job: [host:port, ...]}`` for any processes serving ``/metrics`` and it yields a client once
every target is up. One server per module scrapes two stand-in processes serving
``rmqstore.metrics`` through ``start_metrics_server`` (values the tests set exactly) and the
real services started with ``--metrics-port`` (``start_stack``). Prometheus batches discovery
for about 5 s before its first scrape, hence one server for all tests here.
"""

import contextlib
import json
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2, query_pb2, query_pb2_grpc
from tests import procs
from tests.procs import ServiceProcess

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
DEADLINE_S = 30.0
POLL_S = 0.1


def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.skip("prometheus is not installed (Debian package prometheus; make system-deps)")
    return path


def poll(check: Callable[[], object], what: str, deadline_s: float = DEADLINE_S) -> object:
    """Call ``check`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + deadline_s
    last: object = None
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError):
            last = check()
            if last:
                return last
        time.sleep(POLL_S)
    raise AssertionError(f"timed out after {deadline_s}s waiting for {what} (last: {last!r})")


@dataclass
class Prometheus:
    """Client for a running Prometheus server's HTTP API."""

    url: str
    proc: subprocess.Popen

    def get(self, path: str, **params: str) -> dict:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=5) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """Instant vector: [{"metric": {labels}, "value": [t, "v"]}, ...]."""
        data = self.get("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", data
        return data["result"]

    def values(self, expr: str, by: str) -> dict[str, float]:
        return {r["metric"].get(by, ""): float(r["value"][1]) for r in self.query(expr)}

    def scalar(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def wait_for(self, expr: str, predicate: Callable[[float], bool], what: str) -> float:
        """Poll an expression that yields one sample until ``predicate`` holds."""

        def check() -> list[float]:
            v = self.scalar(expr)
            return [v] if v is not None and predicate(v) else []  # [0.0] is truthy

        found = poll(check, f"{what} ({expr})")
        assert isinstance(found, list)
        return found[0]

    def targets(self) -> list[dict]:
        return self.get("/api/v1/targets")["activeTargets"]


@contextlib.contextmanager
def prometheus_scraping(
    tmp_path: Path, targets: dict[str, list[str]], rule_files: Sequence[Path] = ()
) -> Iterator[Prometheus]:
    """Run Prometheus scraping ``targets`` ({job: [host:port]}) every second; yield a client
    once it is ready and every target has been scraped successfully."""
    binary = prometheus_binary()
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": addrs}]}
            for job, addrs in targets.items()
        ],
    }
    config_path = tmp_path / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    port = procs.free_port()
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    prom = Prometheus(f"http://127.0.0.1:{port}", proc)
    try:

        def ready() -> bool:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as resp:
                return resp.status == 200

        poll(ready, "prometheus to be ready")
        expected = sum(len(a) for a in targets.values())

        def all_up() -> bool:
            active = prom.targets()
            return len(active) == expected and all(t["health"] == "up" for t in active)

        poll(all_up, f"{expected} scrape targets up")
        yield prom
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


# A stand-in service: every metric group of rmqstore.metrics on one registry, served with
# start_metrics_server; it applies the updates it reads as JSON lines on stdin.
METRICS_PROCESS = r"""
import json, sys
from rmqstore import metrics

registry = metrics.new_registry("stand-in")
writer = metrics.WriterMetrics(registry)
writer.watch_store(sys.argv[2])
cq = metrics.ConsumeQueueBuilderMetrics(registry)
index = metrics.IndexBuilderMetrics(registry)
query = metrics.QueryMetrics(registry)
groups = {"writer": writer, "cq": cq, "index": index, "query": query}
server = metrics.start_metrics_server(int(sys.argv[1]), registry, host="127.0.0.1")
print(f"rmqstore metrics stand-in listening on 127.0.0.1:{server.port}", flush=True)
for line in sys.stdin:
    op = json.loads(line)
    m = getattr(groups[op["group"]], op["metric"])
    if op.get("labels"):
        m = m.labels(**op["labels"])
    for _ in range(op.get("times", 1)):
        getattr(m, op["call"])(*op.get("args", []))
    print("ok", flush=True)
server.stop()
"""


@dataclass
class StandIn:
    proc: subprocess.Popen
    address: str
    store: Path

    def apply(self, group: str, metric: str, call: str, *args: float, times: int = 1,
              **labels: str) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        op = {"group": group, "metric": metric, "call": call, "args": list(args),
              "times": times, "labels": labels}
        self.proc.stdin.write(json.dumps(op) + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok"


def _start_stand_in(store: Path) -> StandIn:
    store.mkdir(parents=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", METRICS_PROCESS, str(procs.free_port()), str(store)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert " listening on " in line, line
    return StandIn(proc, line.rsplit(" listening on ", 1)[1].strip(), store)


def _stop_stand_in(stand_in: StandIn) -> None:
    assert stand_in.proc.stdin is not None
    stand_in.proc.stdin.close()
    try:
        stand_in.proc.wait(10)
    except subprocess.TimeoutExpired:
        stand_in.proc.kill()
        stand_in.proc.wait(10)


# --- the real services -----------------------------------------------------------------------

# Services whose --metrics-port serves today; add "commitlog" once the writer is wired to
# rmqstore.metrics (then also assert its series below).
SERVING_METRICS = ("commitlog", "consume-queue", "index", "query")


@dataclass
class Stack:
    processes: dict[str, ServiceProcess]
    metrics: dict[str, str]  # service -> host:port of /metrics

    def stop(self) -> None:
        for p in reversed(list(self.processes.values())):
            p.stop()


def start_stack(store: Path) -> Stack:
    """Writer, both builders and query on 127.0.0.1, each with a metrics port."""
    ports = {name: procs.free_port() for name in ("commitlog", "consume-queue", "index", "query")}
    common = ("--store", str(store), "--listen", "127.0.0.1:0")
    small_index = ("--index-slots", "1000", "--index-entries", "4000")
    started: dict[str, procs.ServiceProcess] = {}
    stack = Stack(started, {n: f"127.0.0.1:{p}" for n, p in ports.items()})
    try:
        started["commitlog"] = procs.start(
            "services.commitlog", *common, "--commitlog-segment-size", str(1 << 20),
            "--metrics-port", str(ports["commitlog"]))
        writer = ("--commitlog", started["commitlog"].address)
        commands = {
            "consume-queue": ("services.indexer", "consume-queue", *common, *writer,
                              "--metrics-port", str(ports["consume-queue"]),
                              "--flush-interval-ms", "50"),
            "index": ("services.indexer", "index", *common, *writer, *small_index,
                      "--metrics-port", str(ports["index"]), "--flush-interval-ms", "50"),
            "query": ("services.query", *common, *writer, *small_index,
                      "--metrics-port", str(ports["query"])),
        }
        with ThreadPoolExecutor(len(commands)) as pool:  # they only need the writer
            futures = {name: pool.submit(procs.start, *cmd) for name, cmd in commands.items()}
            for name, future in futures.items():
                with contextlib.suppress(Exception):
                    started[name] = future.result()
        for future in futures.values():
            future.result()  # raise the first start failure, after collecting every process
    except BaseException:
        stack.stop()
        raise
    return stack


@dataclass
class Setup:
    prom: Prometheus
    readback: StandIn  # values the read-back test sets
    alerting: StandIn  # values that make the shipped alert rules fire
    stack: Stack


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """Stand-ins, the real services and one Prometheus scraping them all every second, with
    the shipped alert rules loaded (their ``for:`` cut to 0 so they can fire at once)."""
    tmp = tmp_path_factory.mktemp("prometheus")
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("for", None)
    rules = tmp / "rules.yml"
    rules.write_text(yaml.safe_dump(doc))
    with contextlib.ExitStack() as cleanup:
        readback = _start_stand_in(tmp / "readback")
        cleanup.callback(_stop_stand_in, readback)
        alerting = _start_stand_in(tmp / "alerting")
        cleanup.callback(_stop_stand_in, alerting)
        stack = start_stack(tmp / "store")
        cleanup.callback(stack.stop)
        targets = {
            "rmqstore-readback": [readback.address],
            "rmqstore-alerting": [alerting.address],
            **{f"rmqstore-{name}": [stack.metrics[name]] for name in SERVING_METRICS},
        }
        prom = cleanup.enter_context(prometheus_scraping(tmp, targets, [rules]))
        yield Setup(prom, readback, alerting, stack)


def test_prometheus_reads_back_what_the_services_export(setup: Setup) -> None:
    prom, stand_in = setup.prom, setup.readback
    job = '{job="rmqstore-readback"}'
    stand_in.apply("writer", "puts", "inc", times=7, topic="Orders", status="ok")
    stand_in.apply("writer", "puts", "inc", times=2, topic="Orders", status="invalid_argument")
    stand_in.apply("writer", "put_latency", "observe", 0.003, times=5)
    stand_in.apply("cq", "lag_bytes", "set", 1024)
    stand_in.apply("index", "lag_bytes", "set", 4096)
    stand_in.apply("index", "slot_occupancy", "set", 0.25)
    stand_in.apply("query", "queries", "inc", times=3, kind="key", outcome="found")
    stand_in.apply("query", "chain_hops", "observe", 12, kind="key")
    stand_in.apply("writer", "max_offset", "set", 123456)  # last: once seen, all above are
    prom.wait_for(f"rmqstore_writer_max_offset_bytes{job}", lambda v: v == 123456,
                  "the stand-in's max offset")

    target = next(t for t in prom.targets() if t["labels"]["job"] == "rmqstore-readback")
    assert target["scrapeUrl"] == f"http://{stand_in.address}/metrics"
    puts = prom.values('rmqstore_writer_puts_total{job="rmqstore-readback",topic="Orders"}',
                       by="status")
    assert puts == {"ok": 7.0, "invalid_argument": 2.0}
    assert prom.scalar(f"rmqstore_writer_put_latency_seconds_count{job}") == 5
    le = 'rmqstore_writer_put_latency_seconds_bucket{job="rmqstore-readback",le="%s"}'
    assert prom.scalar(le % "0.005") - prom.scalar(le % "0.0025") == 5
    assert prom.values(f"rmqstore_builder_lag_bytes{job}", by="builder") == {
        "consume-queue": 1024.0, "index": 4096.0,
    }
    assert prom.scalar(f"rmqstore_index_slot_occupancy_ratio{job}") == 0.25
    assert prom.scalar('rmqstore_query_requests_total'
                       '{job="rmqstore-readback",kind="key",outcome="found"}') == 3
    hops = 'rmqstore_query_chain_hops_bucket{job="rmqstore-readback",kind="key",le="%s"}'
    assert prom.scalar(hops % "16.0") == 1
    assert prom.scalar(hops % "8.0") == 0
    size = prom.values(f"rmqstore_store_filesystem_size_bytes{job}", by="path")
    assert size == {str(stand_in.store): shutil.disk_usage(stand_in.store).total}
    assert prom.values(f"rmqstore_build_info{job}", by="service") == {"stand-in": 1.0}

    # later changes arrive with later scrapes
    stand_in.apply("writer", "puts", "inc", times=5, topic="Orders", status="ok")
    prom.wait_for('rmqstore_writer_puts_total{job="rmqstore-readback",status="ok"}',
                  lambda v: v == 12, "puts to reach 12")
    prom.wait_for('increase(rmqstore_writer_puts_total{job="rmqstore-readback",status="ok"}[1m])',
                  lambda v: v > 0, "a positive put rate")


def test_shipped_alert_rules_fire_on_exported_metrics(setup: Setup) -> None:
    """Every shipped rule loads and evaluates; a lagging index builder fires
    RmqstoreBuilderLagging labelled with that builder, healthy builders fire nothing."""
    prom = setup.prom
    doc = yaml.safe_load(RULES.read_text())
    groups = prom.get("/api/v1/rules")["groups"]
    loaded = [r for g in groups for r in g["rules"]]
    assert len(loaded) == sum(len(g["rules"]) for g in doc["groups"])

    setup.alerting.apply("cq", "lag_bytes", "set", 0)
    setup.alerting.apply("index", "lag_bytes", "set", 512 * 1024 * 1024)

    def lag_alerts() -> list[dict]:
        return [a for a in prom.get("/api/v1/alerts")["alerts"]
                if a["labels"]["alertname"] == "RmqstoreBuilderLagging"
                and a["state"] == "firing"]

    firing = poll(lag_alerts, "RmqstoreBuilderLagging to fire")
    assert [a["labels"]["builder"] for a in firing] == ["index"]
    assert firing[0]["labels"]["severity"] == "warning"
    assert "512Mi" in firing[0]["annotations"]["summary"]
    rules = prom.get("/api/v1/rules")["groups"]
    assert all(r["health"] == "ok" for g in rules for r in g["rules"]), rules


def test_prometheus_scrapes_the_real_services(setup: Setup) -> None:
    prom, stack = setup.prom, setup.stack
    writer = commitlog_pb2_grpc.CommitLogStub(channel(stack.processes["commitlog"].address))
    messages = [
        common_pb2.Message(topic="Orders", queue_id=i % 4, body=f"body-{i}".encode(),
                           keys=f"order-{i} customer-{i % 3}")
        for i in range(30)
    ]
    results = writer.PutBatch(commitlog_pb2.PutBatchRequest(messages=messages)).results
    end = results[-1].phy_offset + results[-1].size

    for builder, entries in (("consume-queue", 30), ("index", 30 * 3)):
        real = f'{{job="rmqstore-{builder}",builder="{builder}"}}'
        prom.wait_for(f"rmqstore_builder_durable_offset_bytes{real}", lambda v: v == end,
                      f"{builder} durable at {end}")
        assert prom.scalar(f"rmqstore_builder_entries_total{real}") == entries
        prom.wait_for(f"rmqstore_builder_lag_bytes{real}", lambda v: v == 0, f"{builder} lag 0")

    query = query_pb2_grpc.QueryStub(channel(stack.processes["query"].address))
    found = query.QueryByKey(query_pb2.QueryByKeyRequest(topic="Orders", key="customer-1"))
    assert len(found.messages) == 10
    prom.wait_for('sum({job="rmqstore-query",__name__=~"rmqstore_query_.+_count"})',
                  lambda v: v >= 1, "the query to be counted")
    up = prom.values('up{job=~"rmqstore-(commitlog|consume-queue|index|query)"}', by="job")
    assert up == {f"rmqstore-{name}": 1.0 for name in SERVING_METRICS}
    prom.wait_for('rmqstore_writer_max_offset_bytes{job="rmqstore-commitlog"}',
                  lambda v: v == end, "the writer's max offset")
    assert prom.scalar('sum(rmqstore_writer_puts_total{job="rmqstore-commitlog"})') == 30
