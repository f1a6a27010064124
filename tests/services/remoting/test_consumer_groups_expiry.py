"""Expiry in ``ConsumerGroups`` with an injected clock: a member 120 s without a heartbeat
leaves (the rest are notified), a queue lock not renewed for 60 s is free; the groups'
metrics."""

import asyncio
import json

from prometheus_client import CollectorRegistry

from rmqstore.formats import remoting as R
from rmqstore.formats.topics_json import TopicConfig
from rmqstore.metrics_remoting import ConsumerGroupMetrics
from services.remoting.clients import EXPIRY_S, Clients
from services.remoting.consumer_groups import LOCK_EXPIRY_S, ConsumerGroups

C = R.RequestCode


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Conn:
    def __init__(self, name: str) -> None:
        self.remote = name
        self.sent: list[R.Command] = []

    def oneway(self, cmd: R.Command) -> None:
        self.sent.append(cmd)


class Topics:
    def __init__(self) -> None:
        self.created: list[tuple[str, int, int]] = []

    async def get(self, name: str) -> TopicConfig | None:
        return None if all(c[0] != name for c in self.created) else TopicConfig(name, 1, 1, 6)

    async def create(self, name: str, queues: int, perm: int) -> TopicConfig:
        self.created.append((name, queues, perm))
        return TopicConfig(name, queues, queues, perm)


class Watcher:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def members(self, group: str, count: int) -> None:
        self.counts[group] = count


def _heartbeat(client_id: str, group: str) -> R.Command:
    body = {"clientID": client_id, "consumerDataSet": [{"groupName": group,
            "subscriptionDataSet": [{"topic": "T", "subVersion": 1}]}]}  # fmt: skip
    return R.Command(code=C.HEART_BEAT, body=json.dumps(body).encode())


def _groups() -> tuple[ConsumerGroups, Clock, Topics, Watcher]:
    clock, topics, watcher = Clock(), Topics(), Watcher()
    groups = ConsumerGroups(Clients(clock), topics, lambda: None, clock, watcher)  # type: ignore[arg-type]
    return groups, clock, topics, watcher


def test_a_silent_member_expires_and_the_rest_are_told() -> None:
    groups, clock, topics, watcher = _groups()
    a, b = Conn("a"), Conn("b")
    asyncio.run(groups.heartbeat(a, _heartbeat("ca", "G")))  # type: ignore[arg-type]
    clock.now += 60
    asyncio.run(groups.heartbeat(b, _heartbeat("cb", "G")))  # type: ignore[arg-type]
    assert topics.created == [("%RETRY%G", 1, 6)]  # once
    assert watcher.counts == {"G": 2}
    a.sent.clear()
    clock.now += EXPIRY_S - 59  # a: 121 s silent, b: 61 s
    groups.expire()
    assert [m.client_id for m in groups.members("G")] == ["cb"]
    assert [(c.code, c.ext) for c in b.sent][-1] == \
        (C.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "G"})
    assert a.sent == [] and watcher.counts == {"G": 1}
    clock.now += EXPIRY_S
    groups.expire()
    assert groups.members("G") == [] and watcher.counts == {"G": 0}


def _lock_request(code: int, client_id: str) -> R.Command:
    body = {"clientId": client_id, "consumerGroup": "G",
            "mqSet": [{"brokerName": "b", "queueId": 0, "topic": "T"}]}  # fmt: skip
    return R.Command(code=code, body=json.dumps(body).encode())


def test_an_unrenewed_lock_is_free_after_60_s() -> None:
    groups, clock, _topics, _watcher = _groups()

    def held(client_id: str) -> int:
        answer = groups.lock(None, _lock_request(C.LOCK_BATCH_MQ, client_id))  # type: ignore[arg-type]
        return len(R.parse_json_body(answer.body)["lockOKMQSet"])

    assert held("c1") == 1
    clock.now += LOCK_EXPIRY_S
    assert held("c2") == 0  # 60 s: still c1's
    assert held("c1") == 1  # renewed
    clock.now += LOCK_EXPIRY_S + 1
    assert held("c2") == 1
    clock.now += LOCK_EXPIRY_S + 1
    groups.expire()
    assert groups.locks == {}


def test_group_metrics_follow_members_and_send_backs() -> None:
    registry = CollectorRegistry()
    metrics = ConsumerGroupMetrics(registry)
    clock = Clock()
    groups = ConsumerGroups(Clients(clock), Topics(), lambda: None, clock,  # type: ignore[arg-type]
                            metrics)  # fmt: skip
    asyncio.run(groups.heartbeat(Conn("a"), _heartbeat("ca", "G")))  # type: ignore[arg-type]
    members = "rmqstore_remoting_consumer_group_members"
    assert registry.get_sample_value(members, {"group": "G"}) == 1
    clock.now += EXPIRY_S + 1
    groups.expire()
    assert registry.get_sample_value(members, {"group": "G"}) is None  # gone with its members
    metrics.sent_back("G", dead=False)
    metrics.sent_back("G", dead=True)
    assert registry.get_sample_value("rmqstore_remoting_send_backs_total", {"group": "G"}) == 2
    assert registry.get_sample_value("rmqstore_remoting_dead_letters_total", {"group": "G"}) == 1
