"""A whole store node as real processes (writer, two builders, query) plus producers and checks.

``Cluster`` starts the four services on one store directory; the writer keeps one fixed
address so the builders and the query service find it again after it is restarted.
``Producer`` threads put continuously and keep every acknowledgement (``Sent``); each attempt
uses fresh keys, so a put that failed but was stored anyway never makes a key ambiguous.
``verify`` checks every acknowledged message through the query service: by queue offset
(Pull), by each key (QueryByKey), by offset id and by unique key (QueryById).
"""

import random
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from rmqstore.server import CHANNEL_OPTIONS
from rmqstore.v1 import (
    commitlog_pb2,
    commitlog_pb2_grpc,
    common_pb2,
    indexer_pb2,
    indexer_pb2_grpc,
    query_pb2,
    query_pb2_grpc,
)
from tests import procs

SEGMENT = 1 << 20
CQ_ENTRIES = 512
INDEX_SLOTS = 211
INDEX_ENTRIES = 2000
SERVICES = ("writer", "consume-queue", "index", "query")


# own subchannels and a short reconnect back-off: a restarted service is reached at once
TEST_CHANNEL_OPTIONS = [
    *CHANNEL_OPTIONS,
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 500),
]


def fresh_channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=TEST_CHANNEL_OPTIONS)


def wait_until(cond: Callable[[], Any], timeout: float, what: str, step: float = 0.02) -> Any:
    """Poll ``cond`` until it returns something truthy; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


class Cluster:
    """The four services of one store node, each restartable (SIGKILL or SIGTERM)."""

    def __init__(self, store: Path, flush: str = "sync", writer_extra: tuple[str, ...] = (),
                 with_query: bool = True) -> None:
        self.store = store
        self.flush = flush
        self.writer_extra = writer_extra
        self.writer_address = f"127.0.0.1:{procs.free_port()}"
        self.procs: dict[str, procs.ServiceProcess] = {}
        self.kills: dict[str, int] = dict.fromkeys(SERVICES, 0)
        self._channels: dict[str, grpc.Channel] = {}
        self._old_channels: list[grpc.Channel] = []
        self.names = SERVICES if with_query else SERVICES[:3]

    # -- processes ---------------------------------------------------------------------------
    def _args(self, name: str) -> tuple[str, tuple[str, ...]]:
        store = str(self.store)
        if name == "writer":
            return "services.commitlog", (
                "--store", store, "--listen", self.writer_address, "--flush", self.flush,
                "--commitlog-segment-size", str(SEGMENT), "--flush-interval-ms", "50",
                *self.writer_extra)
        if name == "consume-queue":
            return "services.indexer", (
                "consume-queue", "--store", store, "--commitlog", self.writer_address,
                "--listen", "127.0.0.1:0", "--flush-interval-ms", "50",
                "--cq-entries-per-file", str(CQ_ENTRIES))
        if name == "index":
            return "services.indexer", (
                "index", "--store", store, "--commitlog", self.writer_address,
                "--listen", "127.0.0.1:0", "--flush-interval-ms", "50",
                "--index-slots", str(INDEX_SLOTS), "--index-entries", str(INDEX_ENTRIES))
        return "services.query", (
            "--store", store, "--commitlog", self.writer_address, "--listen", "127.0.0.1:0",
            "--index-slots", str(INDEX_SLOTS), "--index-entries", str(INDEX_ENTRIES))

    def start(self, name: str) -> procs.ServiceProcess:
        module, args = self._args(name)
        deadline = time.monotonic() + 30
        while True:  # the writer's fixed port may linger a moment after a kill
            try:
                p = procs.start(module, *args)
                break
            except RuntimeError as e:
                if name != "writer" or time.monotonic() > deadline or "bind" not in str(e):
                    raise
                time.sleep(0.1)
        self.procs[name] = p
        old = self._channels.pop(name, None)
        if old is not None:  # closed at the end: producers may still be using it
            self._old_channels.append(old)
        return p

    def start_many(self, names: Iterable[str]) -> None:
        """Start several services at once (the writer first, if it is among them)."""
        names = list(names)
        if "writer" in names:
            self.start("writer")
            names.remove("writer")
        with ThreadPoolExecutor(max(len(names), 1)) as pool:
            for f in [pool.submit(self.start, n) for n in names]:
                f.result()

    def start_all(self) -> "Cluster":
        self.start_many(self.names)
        return self

    def kill(self, name: str) -> None:
        self.procs[name].kill()
        self.kills[name] += 1

    def stop_all(self) -> dict[str, int]:
        """SIGTERM every service (query first, writer last); returns the exit codes."""
        codes = {}
        for name in reversed(self.names):
            p = self.procs.get(name)
            if p is not None:
                codes[name] = p.stop()
        for ch in [*self._channels.values(), *self._old_channels]:
            ch.close()
        self._channels.clear()
        self._old_channels.clear()
        return codes

    def log(self, name: str) -> str:
        return "\n".join(self.procs[name].lines[-40:])

    # -- stubs -------------------------------------------------------------------------------
    def _channel(self, name: str) -> grpc.Channel:
        ch = self._channels.get(name)
        if ch is None:
            ch = self._channels[name] = fresh_channel(self.procs[name].address)
        return ch

    @property
    def writer(self) -> commitlog_pb2_grpc.CommitLogStub:
        return commitlog_pb2_grpc.CommitLogStub(self._channel("writer"))

    @property
    def query(self) -> query_pb2_grpc.QueryStub:
        return query_pb2_grpc.QueryStub(self._channel("query"))

    def builder(self, name: str) -> indexer_pb2_grpc.BuilderStub:
        return indexer_pb2_grpc.BuilderStub(self._channel(name))

    def offsets(self) -> commitlog_pb2.Offsets:
        return self.writer.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=5)

    def progress(self, name: str) -> indexer_pb2.Progress:
        return self.builder(name).GetProgress(indexer_pb2.GetProgressRequest(), timeout=5)

    def wait_caught_up(self, timeout: float = 60) -> int:
        """Wait until both builders' durable offset equals the writer's max offset."""
        end = self.offsets().max_offset
        for name in ("consume-queue", "index"):
            wait_until(lambda n=name: self.progress(n).durable_offset == end, timeout,
                       f"{name} to make {end} durable "
                       f"(last progress: {self.progress(name)})\n{self.log(name)}")
        return end


# -- producers -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sent:
    """One acknowledged message: what was sent and what the writer answered."""

    key: str  # unique per attempt
    group: str  # shared by the messages of one batch
    tags: str
    body: bytes
    result: commitlog_pb2.PutResult


def make_message(rng: random.Random, topic: str, queues: int, key: str, group: str
                 ) -> common_pb2.Message:
    body = rng.randbytes(rng.choice((1, 17, 100, 700, 3000)))
    return common_pb2.Message(topic=topic, queue_id=rng.randrange(queues), body=body,
                              tags=rng.choice(("TagA", "TagB", "")), keys=f"{key} {group}")


class Producer(threading.Thread):
    """Puts batches until stopped; survives writer restarts; keeps every acknowledgement."""

    def __init__(self, cluster: Cluster, n: int, topics: tuple[str, ...], queues: int = 4,
                 batch: int = 10, limit: int = 10**9, seed: int = 0, pace: float = 0.0) -> None:
        super().__init__(daemon=True, name=f"producer-{n}")
        self.cluster, self.n, self.topics, self.queues = cluster, n, topics, queues
        self.batch, self.limit, self.pace = batch, limit, pace
        self.rng = random.Random(seed * 1000 + n)
        self.sent: list[Sent] = []
        self.failures = 0  # puts that got no acknowledgement (writer down)
        self.stop_event = threading.Event()
        self.paused = threading.Event()
        self.idle = threading.Event()
        self.unexpected: list[str] = []

    def run(self) -> None:
        attempt = 0
        while not self.stop_event.is_set() and len(self.sent) < self.limit:
            if self.paused.is_set():
                self.idle.set()
                time.sleep(0.005)
                continue
            self.idle.clear()
            attempt += 1
            group = f"g{self.n}-{attempt}"
            topic = self.topics[attempt % len(self.topics)]
            count = min(self.batch, self.limit - len(self.sent))
            msgs = [make_message(self.rng, topic, self.queues, f"k{self.n}-{attempt}-{i}", group)
                    for i in range(count)]
            try:
                resp = self.cluster.writer.PutBatch(
                    commitlog_pb2.PutBatchRequest(messages=msgs), timeout=10)
            except (grpc.RpcError, KeyError) as e:
                code = e.code() if isinstance(e, grpc.Call) else None
                if code not in (None, grpc.StatusCode.UNAVAILABLE,
                                grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
                    self.unexpected.append(f"{code}: {e.details()}")  # type: ignore[union-attr]
                self.failures += 1
                time.sleep(0.02)
                continue
            for m, r in zip(msgs, resp.results, strict=True):
                key, grp = m.keys.split(" ")
                self.sent.append(Sent(key, grp, m.tags, m.body, r))
            if self.pace:  # keep the message count (and so the checking time) modest
                self.stop_event.wait(self.pace)
        self.idle.set()


class Producers:
    def __init__(self, cluster: Cluster, count: int, topics: tuple[str, ...], **kw: Any) -> None:
        self.threads = [Producer(cluster, n, topics, **kw) for n in range(count)]

    def start(self) -> "Producers":
        for t in self.threads:
            t.start()
        return self

    @property
    def acked(self) -> int:
        return sum(len(t.sent) for t in self.threads)

    @property
    def failures(self) -> int:
        return sum(t.failures for t in self.threads)

    def pause(self) -> None:
        for t in self.threads:
            t.idle.clear()
            t.paused.set()
        for t in self.threads:
            wait_until(lambda t=t: t.idle.is_set() or not t.is_alive(), 30, f"{t.name} to pause")

    def resume(self) -> None:
        for t in self.threads:
            t.paused.clear()

    def stop(self) -> list[Sent]:
        for t in self.threads:
            t.stop_event.set()
        for t in self.threads:
            t.join(30)
        unexpected = [u for t in self.threads for u in t.unexpected]
        assert not unexpected, f"producers got unexpected errors: {unexpected[:5]}"
        return self.all()

    def all(self) -> list[Sent]:
        return [s for t in self.threads for s in t.sent]


# -- verification ----------------------------------------------------------------------------
@dataclass
class Findings:
    checked: int = 0
    pulled: int = 0
    by_key: int = 0
    by_id: int = 0
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(text)


def _same(msg: common_pb2.StoredMessage, s: Sent) -> str:
    r = s.result
    if (msg.phy_offset, msg.queue_offset, msg.queue_id, msg.topic) != (
            r.phy_offset, r.queue_offset, r.queue_id, r.topic):
        return (f"at ({msg.topic}, {msg.queue_id}, {msg.queue_offset}, phy {msg.phy_offset}) "
                f"instead of ({r.topic}, {r.queue_id}, {r.queue_offset}, phy {r.phy_offset})")
    if msg.body != s.body or msg.keys != f"{s.key} {s.group}" or msg.tags != s.tags:
        return "bytes differ"
    if (msg.unique_key, msg.msg_id, msg.store_timestamp) != (
            r.unique_key, r.msg_id, r.store_timestamp):
        return "ids or store time differ"
    return ""


def pull_queue(query: query_pb2_grpc.QueryStub, topic: str, queue_id: int
               ) -> list[common_pb2.StoredMessage]:
    out: list[common_pb2.StoredMessage] = []
    offset = 0
    while True:
        resp = query.Pull(query_pb2.PullRequest(topic=topic, queue_id=queue_id, offset=offset,
                                                max_messages=256), timeout=30)
        if resp.status != query_pb2.FOUND:
            return out
        out.extend(resp.messages)
        if resp.next_offset <= offset:
            raise AssertionError(f"pull of {topic}/{queue_id} did not advance at {offset}")
        offset = resp.next_offset


def verify(cluster: Cluster, sent: Iterable[Sent], workers: int = 4,
           by_key: bool = True, by_id: bool = True) -> Findings:
    """Every acknowledged message is found exactly once by queue offset, key and id.

    Always: every queue pulled from offset 0 (offsets contiguous, each message once, bytes
    equal) and every batch's shared key queried (each message once). ``by_key``: each
    message's own key and unique key; ``by_id``: its offset id and its unique key as an id.
    """
    sent = list(sent)
    found = Findings(checked=len(sent))
    query = cluster.query
    queues = sorted({(s.result.topic, s.result.queue_id) for s in sent})
    for topic, qid in queues:
        msgs = pull_queue(query, topic, qid)
        found.pulled += len(msgs)
        offsets = [m.queue_offset for m in msgs]
        if offsets != list(range(len(msgs))):
            found.problem(f"{topic}/{qid}: queue offsets are not 0..{len(msgs) - 1} once each")
        at = {m.queue_offset: m for m in msgs}
        keys_seen: dict[str, int] = {}
        for m in msgs:
            k = m.keys.split(" ")[0]
            keys_seen[k] = keys_seen.get(k, 0) + 1
        for s in sent:
            if (s.result.topic, s.result.queue_id) != (topic, qid):
                continue
            m = at.get(s.result.queue_offset)
            if m is None:
                found.problem(f"{s.key}: no message at {topic}/{qid}@{s.result.queue_offset}")
            elif diff := _same(m, s):
                found.problem(f"{s.key} by queue offset: {diff}")
            elif keys_seen.get(s.key) != 1:
                found.problem(f"{s.key}: pulled {keys_seen.get(s.key)} times from its queue")

    def one(s: Sent) -> list[str]:
        issues: list[str] = []
        r = s.result
        if by_key:
            for key in (s.key, r.unique_key):
                resp = query.QueryByKey(query_pb2.QueryByKeyRequest(topic=r.topic, key=key),
                                        timeout=30)
                if len(resp.messages) != 1:
                    issues.append(f"{s.key}: key {key} found {len(resp.messages)} times")
                elif diff := _same(resp.messages[0], s):
                    issues.append(f"{s.key} by key {key}: {diff}")
        if by_id:
            for mid in (r.msg_id, r.unique_key):
                resp = query.QueryById(query_pb2.QueryByIdRequest(id=mid, topic=r.topic),
                                       timeout=30)
                if len(resp.messages) != 1:
                    issues.append(f"{s.key}: id {mid} found {len(resp.messages)} times")
                elif diff := _same(resp.messages[0], s):
                    issues.append(f"{s.key} by id {mid}: {diff}")
        return issues

    groups: dict[tuple[str, str], list[Sent]] = {}
    for s in sent:
        groups.setdefault((s.result.topic, s.group), []).append(s)

    def group(item: tuple[tuple[str, str], list[Sent]]) -> list[str]:
        (topic, grp), members = item
        resp = query.QueryByKey(query_pb2.QueryByKeyRequest(topic=topic, key=grp,
                                                            max_results=1000), timeout=30)
        by_phy = {m.phy_offset: m for m in resp.messages}
        issues = []
        if len(by_phy) != len(resp.messages) or len(by_phy) != len(members):
            issues.append(f"group key {grp}: {len(resp.messages)} results, want {len(members)}")
        for s in members:
            m = by_phy.get(s.result.phy_offset)
            if m is None or (diff := _same(m, s)):
                issues.append(f"{s.key} by group key {grp}: {'missing' if m is None else diff}")
        return issues

    with ThreadPoolExecutor(workers) as pool:
        for issues in [*pool.map(group, groups.items()),
                       *(pool.map(one, sent) if by_key or by_id else ())]:
            for i in issues:
                found.problem(i)
    found.by_key = len(groups) + (2 * len(sent) if by_key else 0)
    found.by_id = 2 * len(sent) if by_id else 0
    return found
