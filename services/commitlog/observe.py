"""Feeds the writer's Prometheus metrics from the engine: gauges copied at scrape time,
counters and latencies recorded by the servicer around each call."""

from collections import Counter as Tally
from typing import Any

from prometheus_client import CollectorRegistry

from rmqstore import quarantine
from rmqstore.broker_perm import PermissionFile
from rmqstore.metrics import WriterMetrics, on_scrape
from rmqstore.metrics_background import BackgroundMetrics
from services.commitlog.delivery import DeliveryService
from services.commitlog.ha_master import STATUS_NAMES, Replication
from services.commitlog.read_only import Store
from services.commitlog.retention import Retention
from services.commitlog.stored import Stored


class WriterObserver:
    def __init__(
        self, engine: Store, registry: CollectorRegistry | None,
        delivery: DeliveryService | None = None, retention: Retention | None = None,
        replication: Replication | None = None,
    ) -> None:  # fmt: skip
        self.engine = engine
        self.delivery, self.retention = delivery, retention
        self.replication = replication
        self.permission: PermissionFile | None = None  # the broker's, when the writer serves it
        self._slaves_seen: set[str] = set()
        self._flushes_seen = 0
        self._bytes_seen = 0
        self._seen: dict[str, int] = {}
        self._puts_ok: dict[str, Any] = {}  # topic -> its counter
        if registry is None:
            self.m: WriterMetrics | None = None
            return
        on_scrape(registry, self.refresh)  # before the metrics it fills
        self.m = metrics = WriterMetrics(registry)
        self.bg = BackgroundMetrics(registry)
        if delivery is not None:
            delivery.observers.append(self._lateness)
        metrics.segment_size.set(engine.config.segment_size)
        metrics.recovery_duration.set(engine.recovery_seconds)
        metrics.recovery_scanned_bytes.set(engine.recovered.scanned_bytes)
        metrics.recovery_progress.set(1.0)
        metrics.recovering.set(0)
        metrics.recovery_truncated_bytes.inc(engine.recovered.quarantined_bytes)
        if not engine.last_exit_clean:
            metrics.abnormal_recoveries.inc()
        metrics.watch_store(engine.layout.root)
        rm = metrics.replication
        self._status_counts = {s: rm.put_status.labels(status=n) for s, n in STATUS_NAMES.items()}
        role = replication.role if replication is not None else engine.config.role
        for name in ("async_master", "sync_master", "slave"):
            rm.role.labels(role=name).set(1 if name == role else 0)
        if replication is not None:
            replication.waited = rm.sync_wait.observe

    def promoted(self, delivery: DeliveryService | None, retention: Retention | None,
                 replication: Replication) -> None:
        """A slave became a master: watch what now runs (``promotion``)."""
        self.delivery, self.retention, self.replication = delivery, retention, replication
        if self.m is None:
            return
        rm = self.m.replication
        for name in ("async_master", "sync_master", "slave"):
            rm.role.labels(role=name).set(1 if name == replication.role else 0)
        replication.waited = rm.sync_wait.observe
        if delivery is not None:
            delivery.observers.append(self._lateness)

    def puts(self, stored: Stored, seconds: float) -> None:
        m = self.m
        if m is None:
            return
        m.put_latency.observe(seconds)
        m.put_batch_messages.observe(len(stored))
        self._status_counts[stored.status].inc(len(stored))
        topics = stored.topics
        if topics and topics.count(topics[0]) == len(topics):  # one topic, as nearly always
            self._stored(topics[0]).inc(len(topics))
            return
        for topic, n in Tally(topics).items():
            self._stored(topic).inc(n)

    def _stored(self, topic: str) -> Any:
        """The ok-puts counter of a topic (looked up once: ``labels`` costs more than ``inc``)."""
        child = self._puts_ok.get(topic)
        if child is None:
            assert self.m is not None
            child = self.m.puts.labels(topic=topic, status="ok")
            if len(self._puts_ok) < 10_000:
                self._puts_ok[topic] = child
        return child

    def put_failed(self, status: str) -> None:
        if self.m is not None:
            self.m.puts.labels(topic="", status=status).inc()

    def reads(self, records: list[bytes]) -> None:
        if self.m is not None:
            self.m.reads.labels(status="ok").inc(len(records))
            self.m.read_bytes.inc(sum(map(len, records)))

    def stream(self, kind: str, delta: int) -> None:
        """A put or read stream opened (+1) or ended (-1)."""
        if self.m is not None:
            self.m.streams.labels(kind=kind).inc(delta)

    def read_failed(self, status: str, n: int) -> None:
        if self.m is not None:
            self.m.reads.labels(status=status).inc(n)

    def dispatched(self, subscriber: str, n: int) -> None:
        if self.m is not None:
            self.m.dispatched_records.labels(builder=subscriber).inc(n)

    def refresh(self) -> None:
        e, m = self.engine, self.m
        if m is None:
            return
        m.quarantined_bytes.set(quarantine.total_bytes(e.layout))
        m.min_offset.set(e.min_offset)
        m.max_offset.set(e.max_offset)
        m.flushed_offset.set(e.flushed_offset)
        if self.permission is not None:
            m.broker_permission.set(self.permission.perm)
        segs = len(e.segments.segments)
        m.segments.set(segs)
        m.commitlog_disk_bytes.set(segs * e.config.segment_size)
        m.bytes_written.inc(max(e.bytes_written - self._bytes_seen, 0))
        self._bytes_seen = e.bytes_written
        f = e.flusher
        if f.flushes != self._flushes_seen:
            m.flush_latency.observe(f.last_flush_seconds)
            self._flushes_seen = f.flushes
        for name, lag in e.lag().items():
            m.subscriber_lag.labels(builder=name).set(lag)
            m.subscriber_acked_offset.labels(builder=name).set(e.acks.get(name, 0))
        for name, n in e.active_subscriptions().items():
            m.subscribers.labels(builder=name).set(n)
        self.refresh_background()
        self.refresh_replication()

    def refresh_replication(self) -> None:
        r, m = self.replication, self.m
        if r is None or m is None:
            return
        rm = m.replication
        status = r.status()
        rm.slaves.set(len(status.slaves))
        rm.in_sync.set(status.in_sync)
        rm.acked_offset.set(status.acked_offset)
        self._count(rm.refused.labels(reason="below_min"), "below_min", status.refused_below_min)
        self._count(rm.refused.labels(reason="divergent"), "divergent", status.refused_divergent)
        seen = set()
        for s in status.slaves:
            seen.add(s.address)
            rm.slave_acked_offset.labels(slave=s.address).set(s.acked_offset)
            rm.slave_lag.labels(slave=s.address).set(s.lag_bytes)
        for gone in self._slaves_seen - seen:  # a disconnected slave's series end
            rm.slave_acked_offset.remove(gone)
            rm.slave_lag.remove(gone)
        self._slaves_seen = seen

    def _lateness(self, lateness_ms: list[int]) -> None:
        for ms in lateness_ms:
            self.bg.lateness.observe(max(ms, 0) / 1000)

    def _count(self, counter, name: str, total: int) -> None:
        counter.inc(max(total - self._seen.get(name, 0), 0))
        self._seen[name] = total

    def refresh_background(self) -> None:
        bg = self.bg
        if self.delivery is not None:
            d = self.delivery.status()
            self._count(bg.delivered, "delivered", d["delivered"])
            self._count(bg.parked, "parked", d["parked"])
            self._count(bg.skipped, "skipped", d["skipped"])
            self._count(bg.possible_duplicates, "dups", d["possible_duplicates"])
            bg.lag.set(d["lag_ms"] / 1000)
            dues = [lv["next_delivery_ms"] for lv in d["levels"] if lv["next_delivery_ms"]]
            bg.next_delivery.set(min(dues) / 1000 if dues else 0)
            for lv in d["levels"]:
                bg.pending.labels(level=str(lv["level"])).set(lv["pending"])
        if self.retention is not None:
            r = self.retention.status()
            self._count(bg.deleted_bytes, "deleted_bytes", r["deleted_bytes"])
            self._count(bg.deleted_segments, "deleted_segments", r["deleted_segments"])
            bg.disk_used_ratio.set(r["disk_used_ratio"])
            bg.oldest_segment_age.set(r["oldest_segment_age_seconds"])
