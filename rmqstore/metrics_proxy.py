"""Prometheus metrics of the RocketMQ 5 protocol service (proxy): sends, transactions,
connected clients, and the consumer groups it serves."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rmqstore.metrics_buckets import COUNT_BUCKETS


class ProxyMetrics:
    """The RocketMQ 5 protocol service (proxy): sends by topic and message type, business
    errors by RocketMQ code, connected clients by language, transaction checks and outcomes.

    ``outcome`` of a transaction: ``commit`` or ``rollback``; ``source``: ``client``, ``check``
    (a producer's answer to a check) or ``server`` (rolled back after the last unanswered
    check).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.sends = Counter(
            "rmqstore_proxy_messages_sent_total",
            "Messages stored through the RocketMQ 5 protocol, by topic and message type.",
            ["topic", "type"],
            registry=r,
        )
        self.errors = Counter(
            "rmqstore_proxy_errors_total",
            "Requests refused with a RocketMQ status code, by RPC and code.",
            ["rpc", "code"],
            registry=r,
        )
        self.clients = Gauge(
            "rmqstore_proxy_clients",
            "Clients known to the proxy (by x-mq-client-id), by SDK language.",
            ["language"],
            registry=r,
        )
        self.transaction_checks = Counter(
            "rmqstore_proxy_transaction_checks_total",
            "Orphaned-transaction checks pushed to a producer (sent) or due with no producer "
            "connected (no_producer).",
            ["result"],
            registry=r,
        )
        self.transactions = Counter(
            "rmqstore_proxy_transactions_total",
            "Transactions ended, by outcome and source.",
            ["outcome", "source"],
            registry=r,
        )
        self.open_transactions = Gauge(
            "rmqstore_proxy_open_transactions",
            "Half messages waiting for a commit or rollback.",
            registry=r,
        )
        self.batch_size = Histogram(
            "rmqstore_proxy_batch_messages",
            "Messages per batched put to the writer.",
            buckets=COUNT_BUCKETS,
            registry=r,
        )
        self._languages: set[str] = set()

    def set_clients(self, by_language: dict[str, int]) -> None:
        for lang in self._languages - set(by_language):
            self.clients.labels(lang).set(0)
        for lang, n in by_language.items():
            self.clients.labels(lang).set(n)
        self._languages |= set(by_language)


class ConsumerGroupMetrics:
    """Consumer groups served by the proxy, per group and topic: lag (messages not yet
    settled, and the age of the oldest of them), messages in flight, deliveries, acks,
    redeliveries (an invisible time that ran out, a nack, or a restart), dead letters, offsets
    skipped (their messages deleted by retention) and offsets corrected (beyond the queue's
    end after a commitlog cut)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        labels = ["group", "topic"]
        self.lag = Gauge(
            "rmqstore_consumer_lag_messages",
            "Messages of the topic the group has not settled (max offset - committed offset).",
            labels,
            registry=r,
        )
        self.lag_age = Gauge(
            "rmqstore_consumer_lag_seconds",
            "Age of the oldest message the group has not settled (0 without lag).",
            labels,
            registry=r,
        )
        self.inflight = Gauge(
            "rmqstore_consumer_inflight_messages",
            "Messages handed out to the group and neither acknowledged nor visible again.",
            labels,
            registry=r,
        )
        self.counters = {
            event: Counter(f"rmqstore_consumer_{name}_total", help_, labels, registry=r)
            for event, name, help_ in (
                ("delivered", "deliveries", "Messages handed out to the group (every attempt)."),
                ("acked", "acks", "Messages the group acknowledged."),
                ("redelivered", "redeliveries",
                 "Deliveries after the first (invisible time over, nack, restart)."),
                ("retried", "retries",
                 "Messages copied to the group's %RETRY% topic (invisible time over)."),
                ("dead_lettered", "dead_letters", "Messages moved to the group's %DLQ% topic."),
                ("skipped", "skipped_messages",
                 "Offsets the group was moved over because their messages are no longer "
                 "stored (retention deleted them before the group consumed them)."),
                ("corrected", "offset_corrections",
                 "Times the group's offset was beyond its queue's end (the commitlog was cut "
                 "after a crash) and was moved back to the end."),
                ("dead_letter_failed", "dead_letter_failures",
                 "Dead letters the store did not take (per message and try; tried again "
                 "unless dropped)."),
                ("dead_letter_dropped", "dead_letters_dropped",
                 "Messages settled with no dead letter after their last delivery: one could "
                 "never be written (see the proxy's log)."),
            )
        }  # fmt: skip
        self._children: dict[tuple[str, str, str], Any] = {}

    def event(self, group: str, topic: str, what: str, n: int) -> None:
        child = self._children.get((group, topic, what))
        if child is None:
            child = self.counters[what].labels(group, topic)
            if len(self._children) < 100_000:
                self._children[(group, topic, what)] = child
        child.inc(n)

    def observe(self, group: str, topic: str, lag: int, age_s: float, inflight: int) -> None:
        self.lag.labels(group, topic).set(lag)
        self.lag_age.labels(group, topic).set(age_s)
        self.inflight.labels(group, topic).set(inflight)
