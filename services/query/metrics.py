"""Records the query service's Prometheus metrics (defined in ``rmqstore.metrics``)."""

from prometheus_client import CollectorRegistry

from rmqstore.metrics import QueryMetrics


class QueryObserver:
    """One call per answered request; a None registry records nothing (tests, embedding)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.m = QueryMetrics(registry) if registry is not None else None

    def answered(self, kind: str, outcome: str, seconds: float) -> None:
        if self.m is not None:
            self.m.queries.labels(kind=kind, outcome=outcome).inc()
            self.m.latency.labels(kind=kind).observe(seconds)

    def key_walk(self, kind: str, hops: int, results: int, truncated: bool,
                 budget_exhausted: bool) -> None:
        if self.m is not None:
            self.m.chain_hops.labels(kind=kind).observe(hops)
            self.m.results.labels(kind=kind).observe(results)
            if truncated:
                self.m.truncated.labels(kind=kind).inc()
            if budget_exhausted:
                self.m.budget_exhausted.labels(kind=kind, budget="query").inc()

    def pull_skipped(self, offsets: int) -> None:
        """Queue offsets a pull's answer moved the consumer over: their messages are gone."""
        if self.m is not None and offsets > 0:
            self.m.pull_skipped.inc(offsets)
