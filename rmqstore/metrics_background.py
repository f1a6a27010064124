"""Prometheus metrics of the writer's background services: delayed delivery and retention."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Delivery lateness: 1 ms .. 60 s.
LATENESS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0)


class BackgroundMetrics:
    """The writer's background services: delayed delivery and retention."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.delivered = Counter(
            "rmqstore_delivery_delivered_total",
            "Delayed messages put into their real queue.",
            registry=r,
        )
        self.parked = Counter(
            "rmqstore_delivery_parked_total",
            "Messages with a delivery time parked again on a delay level.",
            registry=r,
        )
        self.skipped = Counter(
            "rmqstore_delivery_skipped_total",
            "Schedule-queue units not delivered (no usable REAL_TOPIC, record deleted).",
            registry=r,
        )
        self.possible_duplicates = Counter(
            "rmqstore_delivery_possible_duplicates_total",
            "Messages delivered again after an unclean stop (the last unpersisted step).",
            registry=r,
        )
        self.pending = Gauge(
            "rmqstore_delivery_pending_messages",
            "Delayed messages waiting in the schedule topic, by delay level.",
            ["level"],
            registry=r,
        )
        self.lag = Gauge(
            "rmqstore_delivery_lag_seconds",
            "How long the most overdue undelivered delayed message is overdue (0: none).",
            registry=r,
        )
        self.next_delivery = Gauge(
            "rmqstore_delivery_next_timestamp_seconds",
            "Delivery time of the next delayed message (0: none pending).",
            registry=r,
        )
        self.lateness = Histogram(
            "rmqstore_delivery_lateness_seconds",
            "Time from a message's delivery time to its append to the real queue.",
            buckets=LATENESS_BUCKETS,
            registry=r,
        )
        self.deleted_bytes = Counter(
            "rmqstore_retention_deleted_bytes_total",
            "Commitlog segment bytes deleted by retention.",
            registry=r,
        )
        self.deleted_segments = Counter(
            "rmqstore_retention_deleted_segments_total",
            "Commitlog segments deleted by retention.",
            registry=r,
        )
        self.disk_used_ratio = Gauge(
            "rmqstore_retention_disk_used_ratio",
            "Fraction (0..1) of the store's disk in use, at the last retention pass.",
            registry=r,
        )
        self.oldest_segment_age = Gauge(
            "rmqstore_retention_oldest_segment_age_seconds",
            "Age (since its last write) of the oldest commitlog segment kept.",
            registry=r,
        )
