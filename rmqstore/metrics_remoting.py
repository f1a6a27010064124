"""Prometheus metrics of the RocketMQ 4.x remoting services (name server, broker front end):
requests by command and response code, and their latency by command; on the broker also
pulls by response code, pulls held (long polling), messages pulled and each consumer group's
lag as its pulls show it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from rmqstore.formats import remoting as R
from rmqstore.metrics_buckets import IO_LATENCY_BUCKETS


class Pulls(Protocol):
    suspended: int
    pulled: int

    def lag_by_group(self) -> dict[tuple[str, str], int]: ...

    def commit_outcomes(self) -> dict[str, int]: ...


class _PullCollector(Collector):
    def __init__(self, pulls: Pulls) -> None:
        self.pulls = pulls

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield GaugeMetricFamily("rmqstore_remoting_pulls_suspended",
                                "PULL_MESSAGE requests held right now (long polling).",
                                value=self.pulls.suspended)  # fmt: skip
        yield CounterMetricFamily("rmqstore_remoting_pulled_messages",
                                  "Messages handed out by PULL_MESSAGE.",
                                  value=self.pulls.pulled)  # fmt: skip
        lag = GaugeMetricFamily(
            "rmqstore_remoting_consumer_lag_messages",
            "Messages between each 4.x consumer group's pulls and the ends of the queues "
            "it pulls (queues pulled within the last 2 minutes), by group and topic.",
            labels=["group", "topic"],
        )
        for (group, topic), n in sorted(self.pulls.lag_by_group().items()):
            lag.add_metric([group, topic], n)
        yield lag
        commits = CounterMetricFamily(
            "rmqstore_remoting_offset_commits",
            "4.x consumers' offset commits (with their pulls and UPDATE_CONSUMER_OFFSET) "
            "passed on to the proxy, by outcome: applied; refused (the group pops that "
            "queue); lost (the proxy could not be asked: a pull's commit is then dropped).",
            labels=["outcome"],
        )
        for outcome, n in self.pulls.commit_outcomes().items():
            commits.add_metric([outcome], n)
        yield commits


class RemotingMetrics:
    """``service``: ``namesrv`` or ``remoting``. ``code`` is the response code's name
    (``ONEWAY`` for requests never answered)."""

    def __init__(self, registry: CollectorRegistry, service: str) -> None:
        self.registry = registry
        self._pull_codes: Counter | None = None  # the broker's (watch_pulls)
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

    def acl_refusals(self) -> Callable[[str], None]:
        """The broker's ACL check (``--acl``): what counts the requests it refused, by why."""
        refused = Counter(
            "rmqstore_remoting_acl_refused_total",
            "Requests the ACL check refused (--acl, --acl-file), by reason: no_access_key, "
            "unknown_access_key, no_signature, bad_signature, no_permission.",
            ["reason"],
            registry=self.registry,
        )
        return lambda reason: refused.labels(reason).inc()

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

    def watch_pulls(self, pulls: Pulls) -> None:
        """The broker's pulls: a counter by response code, and what ``pulls`` reports."""
        self._pull_codes = Counter(
            "rmqstore_remoting_pulls_total",
            "PULL_MESSAGE requests answered, by response code.",
            ["code"],
            registry=self.registry,
        )
        self.registry.register(_PullCollector(pulls))

    def pulled(self, group: str, code: int) -> None:
        if self._pull_codes is not None:
            self._pull_codes.labels(R.code_name(code, response=True)).inc()


class ConsumerGroupMetrics:
    """The remoting broker's RocketMQ 4.x consumer groups: live members per group, messages
    given back (CONSUMER_SEND_MSG_BACK) and those of them that became dead letters."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.member_count = Gauge(
            "rmqstore_remoting_consumer_group_members",
            "Live members (connections heartbeating) of a RocketMQ 4.x consumer group.",
            ["group"],
            registry=registry,
        )
        self.send_backs = Counter(
            "rmqstore_remoting_send_backs_total",
            "Messages a consumer group gave back after failing to consume them.",
            ["group"],
            registry=registry,
        )
        self.dead_letters = Counter(
            "rmqstore_remoting_dead_letters_total",
            "Messages given back that went to %DLQ%<group> (reconsumed too often).",
            ["group"],
            registry=registry,
        )

    def members(self, group: str, count: int) -> None:
        if count:
            self.member_count.labels(group).set(count)
            return
        with contextlib.suppress(KeyError):  # never had members
            self.member_count.remove(group)

    def sent_back(self, group: str, dead: bool) -> None:
        self.send_backs.labels(group).inc()
        if dead:
            self.dead_letters.labels(group).inc()
