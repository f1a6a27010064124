"""Prometheus metrics of the RocketMQ 4.x remoting services (name server, broker front end):
requests by command and response code, and their latency by command."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from rmqstore.formats import remoting as R
from rmqstore.metrics import IO_LATENCY_BUCKETS


class RemotingMetrics:
    """``service``: ``namesrv`` or ``remoting``. ``code`` is the response code's name
    (``ONEWAY`` for requests never answered)."""

    def __init__(self, registry: CollectorRegistry, service: str) -> None:
        self.requests = Counter(
            f"rmqstore_{service}_requests_total",
            "Remoting requests answered, by command and response code.",
            ["command", "code"],
            registry=registry,
        )
        self.latency = Histogram(
            f"rmqstore_{service}_request_seconds",
            "Time from a request's arrival to its answer, by command.",
            ["command"],
            buckets=IO_LATENCY_BUCKETS,
            registry=registry,
        )
        self._children: dict[tuple[int, int | None], tuple[Counter, Histogram]] = {}

    def observe(self, command: int, code: int | None, seconds: float) -> None:
        children = self._children.get((command, code))
        if children is None:
            name = R.code_name(command)
            answered = "ONEWAY" if code is None else R.code_name(code, response=True)
            children = (self.requests.labels(name, answered), self.latency.labels(name))
            if len(self._children) < 10_000:
                self._children[(command, code)] = children
        children[0].inc()
        children[1].observe(seconds)
