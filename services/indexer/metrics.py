"""Feeds a builder's Prometheus metrics (defined in ``rmqstore.metrics``) from its counters
at scrape time: nothing is added to the write path."""

import time

from rmqstore import metrics
from services.indexer.consume_queue_builder import ConsumeQueueBuilder
from services.indexer.index_builder import IndexBuilder
from services.indexer.subscriber import Subscriber


class BuilderObserver:
    def __init__(self, subscriber: Subscriber, registry) -> None:
        self.s = subscriber
        b = subscriber.builder
        metrics.on_scrape(registry, self.refresh)  # before the metrics it fills
        if isinstance(b, IndexBuilder):
            self.m: metrics.BuilderMetrics = metrics.IndexBuilderMetrics(registry, b.name)
        else:
            self.m = metrics.ConsumeQueueBuilderMetrics(registry, b.name)
        self._seen = {"entries": b.entries, "batches": 0, "reconnects": 0, "flushes": 0}
        self._caught_up_at = time.monotonic()
        if isinstance(b, IndexBuilder):
            repairs = b.emptied_files + (1 if b.repaired_entries else 0)
            if repairs:
                self.m.repairs.inc(repairs)

    def _delta(self, key: str, value: int) -> int:
        d = max(value - self._seen[key], 0)
        self._seen[key] = value
        return d

    def refresh(self) -> None:
        s, b, m = self.s, self.s.builder, self.m
        now = time.monotonic()
        if b.built_offset >= s.writer_max_offset:
            self._caught_up_at = now
        m.durable_offset.set(b.durable_offset)
        m.lag_bytes.set(max(s.writer_max_offset - b.durable_offset, 0))
        m.lag_seconds.set(now - self._caught_up_at)
        m.entries.inc(self._delta("entries", b.entries))
        m.batches.inc(self._delta("batches", s.batches))
        m.restarts.inc(self._delta("reconnects", s.reconnects))
        m.files.set(b.files)
        if self._delta("flushes", b.flushes):
            m.flush_latency.observe(b.last_flush_seconds)
        if isinstance(b, IndexBuilder) and isinstance(m, metrics.IndexBuilderMetrics):
            m.slots.set(b.slots)
            m.entry_capacity.set(b.capacity)
            h = b.current.header if b.current else None
            m.slots_used.set(h.hash_slot_count if h else 0)
            m.slot_occupancy.set(b.slot_occupancy)
            m.current_entries.set(h.entries if h else 0)
            m.entry_fill.set((h.entries / (b.capacity - 1)) if h else 0)
            if h and h.hash_slot_count:
                m.chain_length.observe(b.mean_chain_length)  # sampled at each scrape
        elif isinstance(b, ConsumeQueueBuilder) and isinstance(
            m, metrics.ConsumeQueueBuilderMetrics
        ):
            m.queues.set(len(b.queues))
