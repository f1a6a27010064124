"""The writer's replication metrics (RocketMQ's HA protocol, ``docs/replication.md``); one
group of ``rmqstore.metrics.WriterMetrics``, as ``WriterMetrics.replication``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rmqstore.metrics_buckets import IO_LATENCY_BUCKETS


class ReplicationMetrics:
    """The writer as a replication master (RocketMQ's HA protocol, docs/replication.md)."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.role = Gauge(
            "rmqstore_writer_role",
            "1 for the writer's role (async_master, sync_master or slave), 0 for the others.",
            ["role"],
            registry=r,
        )
        self.put_status = Counter(
            "rmqstore_writer_put_status_total",
            "Messages stored, by put status (PUT_OK, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE).",
            ["status"],
            registry=r,
        )
        self.sync_wait = Histogram(
            "rmqstore_writer_sync_replica_wait_seconds",
            "sync_master: how long a put waited for a slave's acknowledgement (until PUT_OK "
            "or FLUSH_SLAVE_TIMEOUT).",
            buckets=IO_LATENCY_BUCKETS,
            registry=r,
        )
        self.slaves = Gauge(
            "rmqstore_writer_slaves", "Slaves connected to the HA port.", registry=r
        )
        self.in_sync = Gauge(
            "rmqstore_writer_slaves_in_sync",
            "Slaves that reported and are less than --slave-fallbehind-max behind.",
            registry=r,
        )
        self.acked_offset = Gauge(
            "rmqstore_writer_replica_acked_offset_bytes",
            "Highest commitlog offset any slave acknowledged (never goes down).",
            registry=r,
        )
        self.slave_acked_offset = Gauge(
            "rmqstore_writer_slave_acked_offset_bytes",
            "Offset a connected slave last acknowledged, by its address.",
            ["slave"],
            registry=r,
        )
        self.slave_lag = Gauge(
            "rmqstore_writer_slave_lag_bytes",
            "Writer max offset minus what a connected slave acknowledged, by its address.",
            ["slave"],
            registry=r,
        )
        self.refused = Counter(
            "rmqstore_writer_slaves_refused_total",
            "Slaves refused at their first report: below_min (their offset is below the "
            "oldest file: wipe them), divergent (beyond the end, or inside a record at an offset "
            "this master never sent to that host).",
            ["reason"],
            registry=r,
        )
