"""The Prometheus metrics of the store's services: the writer, the builders, the query service.

The writer's background services (delayed delivery, retention) have theirs in
``rmqstore.metrics_background``, its replication ``rmqstore.metrics_replication``, the
RocketMQ 5 protocol service (proxy) ``rmqstore.metrics_proxy``, the RocketMQ 4.x front end
``rmqstore.metrics_remoting``; every name is defined once.

Each service builds one registry, the metric group it owns on that registry, and serves it::

    from rmqstore import metrics

    registry = metrics.new_registry("commitlog")           # process metrics + build info
    m = metrics.WriterMetrics(registry)
    m.watch_store(store_root)                               # filesystem size/free, read at scrape
    server = metrics.start_metrics_server(args.metrics_port, registry)   # None when port is 0

    with m.put_latency.time():
        result = appender.put(msg)
    m.puts.labels(topic=result.topic, status="ok").inc()
    m.max_offset.set(appender.max_offset)
    ...
    if server:
        server.stop()                                       # on SIGTERM, after the gRPC drain

The builders (``BuilderMetrics("consume-queue", registry)``, ``IndexBuilderMetrics(registry)``)
and the query service (``QueryMetrics(registry)``) work the same way. Every attribute is a
plain prometheus_client object (Counter, Gauge, Histogram, or a builder's labelled child of
one), so services call ``inc``/``set``/``observe``/``time`` on it and nothing else.

Conventions: names start with ``rmqstore_``, values are in base units (bytes, seconds, ratios
0..1), counters end in ``_total``. Builder metrics carry a ``builder`` label equal to the
builder's subscriber name on the dispatch stream (``consume-queue``, ``index``), the same
value the writer uses for ``rmqstore_writer_subscriber_lag_bytes{builder=...}``, so the
writer's view and the builder's view of one builder line up on a dashboard. Several metric
groups may share one registry (``rmqstore serve`` runs everything in one process): builder
families are created once per registry and each builder gets its labelled children.

Nothing here runs on import; no metric lives in prometheus_client's global registry.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)

from rmqstore.metrics_buckets import (  # noqa: F401  (re-exported)
    CHAIN_BUCKETS,
    COUNT_BUCKETS,
    IO_LATENCY_BUCKETS,
    QUERY_LATENCY_BUCKETS,
)
from rmqstore.metrics_http import (  # noqa: F401  (re-exported: services import them from here)
    FilesystemCollector,
    MetricsServer,
    metrics_host,
    new_registry,
    on_scrape,
    start_metrics_server,
)
from rmqstore.metrics_replication import ReplicationMetrics

WRITER = "commitlog"
CONSUME_QUEUE_BUILDER = "consume-queue"
INDEX_BUILDER = "index"


class WriterMetrics:
    """The commitlog writer: puts, bytes, offsets, flushes, segments, subscribers, recovery."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._watched: set[Path] = set()
        r = registry
        self.puts = Counter(
            "rmqstore_writer_puts_total",
            "Messages put, by topic as stored and outcome "
            "(ok, invalid_argument, resource_exhausted, flush_timeout, error).",
            ["topic", "status"],
            registry=r,
        )
        self.put_latency = Histogram(
            "rmqstore_writer_put_latency_seconds",
            "Time from receiving a Put/PutBatch to answering it (includes group commit "
            "under sync flush).",
            buckets=IO_LATENCY_BUCKETS,
            registry=r,
        )
        self.put_batch_messages = Histogram(
            "rmqstore_writer_put_batch_messages",
            "Messages per PutBatch call.",
            buckets=COUNT_BUCKETS,
            registry=r,
        )
        self.bytes_written = Counter(
            "rmqstore_writer_written_bytes_total",
            "Commitlog bytes appended (records plus end-of-segment blanks).",
            registry=r,
        )
        self.min_offset = Gauge(
            "rmqstore_writer_min_offset_bytes", "First commitlog offset still on disk.", registry=r
        )
        self.max_offset = Gauge(
            "rmqstore_writer_max_offset_bytes", "End of the last record written.", registry=r
        )
        self.flushed_offset = Gauge(
            "rmqstore_writer_flushed_offset_bytes",
            "End of the last record known durable.",
            registry=r,
        )
        self.broker_permission = Gauge(
            "rmqstore_writer_broker_permission",
            "The broker's permission (RocketMQ's brokerPermission): 6 read-write, 4 read-only "
            "(drained: producers are refused, consumers still read).",
            registry=r,
        )
        self.flush_latency = Histogram(
            "rmqstore_writer_flush_duration_seconds",
            "Duration of one commitlog flush (msync/fsync of dirty pages).",
            buckets=IO_LATENCY_BUCKETS,
            registry=r,
        )
        self.flushed_bytes = Counter(
            "rmqstore_writer_flushed_bytes_total", "Commitlog bytes made durable.", registry=r
        )
        self.segments = Gauge(
            "rmqstore_writer_segments", "Commitlog segment files on disk.", registry=r
        )
        self.commitlog_disk_bytes = Gauge(
            "rmqstore_writer_commitlog_disk_bytes",
            "Bytes of commitlog segment files (preallocated size).",
            registry=r,
        )
        self.segment_size = Gauge(
            "rmqstore_writer_segment_size_bytes", "Configured commitlog segment size.", registry=r
        )
        self.reads = Counter(
            "rmqstore_writer_read_records_total",
            "Records asked of ReadRecords/ReadRecordsStream, by outcome (ok or the refusal's "
            "status: out_of_range, invalid_argument, resource_exhausted...).",
            ["status"],
            registry=r,
        )
        self.read_bytes = Counter(
            "rmqstore_writer_read_bytes_total", "Record bytes served by ReadRecords.", registry=r
        )
        self.streams = Gauge(
            "rmqstore_writer_streams",
            "Open PutStream (kind=put) and ReadRecordsStream (kind=read) calls.",
            ["kind"],
            registry=r,
        )
        self.subscribers = Gauge(
            "rmqstore_writer_subscribers",
            "Open dispatch-stream subscriptions, by subscriber name.",
            ["builder"],
            registry=r,
        )
        self.subscriber_lag = Gauge(
            "rmqstore_writer_subscriber_lag_bytes",
            "Writer max offset minus the offset the builder last acknowledged as durable.",
            ["builder"],
            registry=r,
        )
        self.subscriber_acked_offset = Gauge(
            "rmqstore_writer_subscriber_acked_offset_bytes",
            "Offset up to which a builder acknowledged durable output.",
            ["builder"],
            registry=r,
        )
        self.dispatched_records = Counter(
            "rmqstore_writer_dispatched_records_total",
            "Dispatch records sent on the Subscribe stream, by subscriber.",
            ["builder"],
            registry=r,
        )
        self.recovering = Gauge(
            "rmqstore_writer_recovering", "1 while start-up recovery runs, else 0.", registry=r
        )
        self.recovery_progress = Gauge(
            "rmqstore_writer_recovery_progress_ratio",
            "Fraction (0..1) of the commitlog bytes to check that recovery has checked.",
            registry=r,
        )
        self.recovery_scanned_bytes = Gauge(
            "rmqstore_writer_recovery_scanned_bytes",
            "Commitlog bytes recovery has checked so far.",
            registry=r,
        )
        self.recovery_duration = Gauge(
            "rmqstore_writer_recovery_duration_seconds",
            "Duration of the last completed start-up recovery.",
            registry=r,
        )
        self.recovery_truncated_bytes = Counter(
            "rmqstore_writer_recovery_truncated_bytes_total",
            "Bytes cut from the commitlog tail by recovery (torn or corrupt records); each "
            "was kept in the quarantine first.",
            registry=r,
        )
        self.quarantined_bytes = Gauge(
            "rmqstore_store_quarantined_bytes",
            "Bytes recovery has cut from the commitlog and kept in rmqstore/quarantine/ "
            "(all starts so far; rmqstore inspect lists the ranges).",
            registry=r,
        )
        self.abnormal_recoveries = Counter(
            "rmqstore_writer_abnormal_recoveries_total",
            "Start-ups that found the abort file (previous run did not stop cleanly).",
            registry=r,
        )
        self.replication = ReplicationMetrics(r)

    def watch_store(self, root: str | Path) -> None:
        """Export size and free space of the filesystem holding ``root`` (once per path)."""
        path = Path(root)
        if path not in self._watched:
            self._registry.register(FilesystemCollector(path))
            self._watched.add(path)


_shared: WeakKeyDictionary[CollectorRegistry, dict[str, Any]] = WeakKeyDictionary()
_shared_lock = threading.Lock()


def _family(
    registry: CollectorRegistry,
    cls: type,
    name: str,
    doc: str,
    labels: tuple[str, ...] = (),
    **kw: Any,
) -> Any:
    """The registry's metric ``name``, created on first use (so groups can be built twice)."""
    with _shared_lock:
        known = _shared.setdefault(registry, {})
        if name not in known:
            known[name] = cls(name, doc, list(labels), registry=registry, **kw)
        return known[name]


class BuilderMetrics:
    """One builder (``name`` = its subscriber name): progress, lag, output, flushes, repairs.

    Attributes are the ``builder=name`` children of families shared by all builders of the
    registry, so ``m.lag_bytes.set(n)`` needs no labels.
    """

    def __init__(self, name: str, registry: CollectorRegistry) -> None:
        self.name = name

        def child(cls: type, metric: str, doc: str, **kw: Any) -> Any:
            return _family(registry, cls, metric, doc, ("builder",), **kw).labels(builder=name)

        self.durable_offset = child(
            Gauge,
            "rmqstore_builder_durable_offset_bytes",
            "Commitlog offset up to which the builder's output is durable.",
        )
        self.lag_bytes = child(
            Gauge,
            "rmqstore_builder_lag_bytes",
            "Writer max offset (as last seen on the stream) minus the durable offset.",
        )
        self.lag_seconds = child(
            Gauge,
            "rmqstore_builder_lag_seconds",
            "Store time of the newest record seen minus that of the last record built.",
        )
        self.entries = child(
            Counter,
            "rmqstore_builder_entries_total",
            "Entries written (consume-queue units or index entries).",
        )
        self.skipped = child(
            Counter,
            "rmqstore_builder_skipped_records_total",
            "Dispatch records that produced no entry (transaction prepare/rollback, no keys).",
        )
        self.batches = child(Counter, "rmqstore_builder_batches_total", "Dispatch batches applied.")
        self.batch_records = child(
            Histogram,
            "rmqstore_builder_batch_records",
            "Dispatch records per applied batch.",
            buckets=COUNT_BUCKETS,
        )
        self.files = child(Gauge, "rmqstore_builder_files", "Files the builder owns on disk.")
        self.disk_bytes = child(
            Gauge, "rmqstore_builder_disk_bytes", "Bytes of the files the builder owns on disk."
        )
        self.flush_latency = child(
            Histogram,
            "rmqstore_builder_flush_duration_seconds",
            "Duration of one builder flush (data files, then progress record).",
            buckets=IO_LATENCY_BUCKETS,
        )
        self.restarts = child(
            Counter,
            "rmqstore_builder_restarts_total",
            "Times the builder (re)subscribed to the dispatch stream after an error.",
        )
        self.repairs = child(
            Counter,
            "rmqstore_builder_repairs_total",
            "Files repaired or rebuilt from the commitlog at start-up.",
        )
        self.truncated_entries = child(
            Counter,
            "rmqstore_builder_truncated_entries_total",
            "Entries cut because they pointed past the commitlog's end.",
        )


class ConsumeQueueBuilderMetrics(BuilderMetrics):
    """The consume-queue builder: the common builder metrics plus the number of queues."""

    def __init__(self, registry: CollectorRegistry, name: str = CONSUME_QUEUE_BUILDER) -> None:
        super().__init__(name, registry)
        self.queues = _family(
            registry,
            Gauge,
            "rmqstore_consume_queue_queues",
            "(topic, queue id) pairs that have a consume queue.",
        )


class IndexBuilderMetrics(BuilderMetrics):
    """The index builder: the common builder metrics plus index health.

    The ``current`` file is the one being appended to; ``slot_occupancy`` is the fraction of
    its hash slots in use, ``entry_fill`` the fraction of its entry capacity in use, and
    ``chain_length`` observes, for each key put, the length of the slot's chain after the put.
    """

    def __init__(self, registry: CollectorRegistry, name: str = INDEX_BUILDER) -> None:
        super().__init__(name, registry)
        r = registry
        self.keys = _family(
            r,
            Counter,
            "rmqstore_index_keys_total",
            "Keys indexed, by kind (unique = topic#UNIQ_KEY, key = topic#KEY).",
            ("kind",),
        )
        self.slots = _family(
            r, Gauge, "rmqstore_index_slots", "Hash slots per index file (configured)."
        )
        self.entry_capacity = _family(
            r, Gauge, "rmqstore_index_entry_capacity", "Entries per index file (configured)."
        )
        self.slots_used = _family(
            r, Gauge, "rmqstore_index_slots_used", "Hash slots in use in the current index file."
        )
        self.slot_occupancy = _family(
            r,
            Gauge,
            "rmqstore_index_slot_occupancy_ratio",
            "Fraction of the current index file's hash slots in use.",
        )
        self.current_entries = _family(
            r, Gauge, "rmqstore_index_current_file_entries", "Entries in the current index file."
        )
        self.entry_fill = _family(
            r,
            Gauge,
            "rmqstore_index_entry_fill_ratio",
            "Fraction of the current index file's entry capacity in use.",
        )
        self.chain_length = _family(
            r,
            Histogram,
            "rmqstore_index_chain_length",
            "Length of a slot's chain right after a key was put in it.",
            buckets=CHAIN_BUCKETS,
        )
        self.max_chain_length = _family(
            r,
            Gauge,
            "rmqstore_index_max_chain_length",
            "Longest chain seen in the current index file.",
        )
        self.files_rolled = _family(
            r,
            Counter,
            "rmqstore_index_files_rolled_total",
            "Index files closed because they were full.",
        )


class QueryMetrics:
    """The query service: queries by kind and outcome, latency, chain hops, bounds hit.

    ``kind`` is one of ``key``, ``id``, ``view``, ``queue``, ``time``; ``outcome`` one of
    ``found``, ``not_found``, ``truncated``, ``invalid_argument``, ``out_of_range``,
    ``error`` (or a RocketMQ pull status in lower case for queue reads).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.queries = Counter(
            "rmqstore_query_requests_total",
            "Queries answered, by kind and outcome.",
            ["kind", "outcome"],
            registry=r,
        )
        self.latency = Histogram(
            "rmqstore_query_latency_seconds",
            "Time to answer a query, by kind.",
            ["kind"],
            buckets=QUERY_LATENCY_BUCKETS,
            registry=r,
        )
        self.chain_hops = Histogram(
            "rmqstore_query_chain_hops",
            "Index chain entries walked by one key or id query.",
            ["kind"],
            buckets=CHAIN_BUCKETS,
            registry=r,
        )
        self.index_files_scanned = Histogram(
            "rmqstore_query_index_files_scanned",
            "Index files whose chains one key or id query walked.",
            ["kind"],
            buckets=COUNT_BUCKETS,
            registry=r,
        )
        self.candidates = Counter(
            "rmqstore_query_candidates_total",
            "Records fetched to check a key or id match.",
            ["kind"],
            registry=r,
        )
        self.false_candidates = Counter(
            "rmqstore_query_false_candidates_total",
            "Fetched records dropped (hash collision, wrong topic/key or time).",
            ["kind"],
            registry=r,
        )
        self.results = Histogram(
            "rmqstore_query_results",
            "Messages returned by one query.",
            ["kind"],
            buckets=COUNT_BUCKETS,
            registry=r,
        )
        self.fetched_bytes = Counter(
            "rmqstore_query_fetched_bytes_total",
            "Record bytes fetched from the writer.",
            ["kind"],
            registry=r,
        )
        self.truncated = Counter(
            "rmqstore_query_truncated_total",
            "Queries whose result was cut at the limit (a cursor was returned).",
            ["kind"],
            registry=r,
        )
        self.budget_exhausted = Counter(
            "rmqstore_query_budget_exhausted_total",
            "Queries stopped by a bound, by kind and budget (hops, bytes, time).",
            ["kind", "budget"],
            registry=r,
        )
        self.pull_skipped = Counter(
            "rmqstore_query_pull_skipped_offsets_total",
            "Queue offsets a pull moved its consumer over because their messages are no longer "
            "stored: up to the queue's first stored message (OFFSET_TOO_SMALL), or deleted by "
            "retention while the pull read them.",
            registry=r,
        )
