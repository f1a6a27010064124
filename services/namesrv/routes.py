"""The name server's tables (RocketMQ's ``RouteInfoManager``), in memory: which brokers live
at which addresses, in which cluster, and which topics have queues on which broker.

A broker registers every 30 s and is dropped ``BROKER_EXPIRY_S`` after its last registration
(or when the connection it registered on closes); one that gives a timeout of its own when it
registers (RocketMQ 5's ``heartbeatTimeoutMillis``) is dropped that long after. ``clock``
(seconds, monotonic) is injectable so tests can move time. Nothing here touches the network.
"""

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rmqstore.formats.topics_json import PERM_WRITE

MASTER_ID = 0
BROKER_EXPIRY_S = 120.0


@dataclass
class QueueData:
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self, broker_name: str) -> dict[str, Any]:
        return {"brokerName": broker_name, "perm": self.perm,
                "readQueueNums": self.read_queue_nums, "topicSysFlag": self.topic_sys_flag,
                "writeQueueNums": self.write_queue_nums}  # fmt: skip


@dataclass
class BrokerData:
    cluster: str
    broker_name: str
    addrs: dict[int, str] = field(default_factory=dict)  # broker id -> ip:port

    def to_json(self) -> dict[str, Any]:
        return {"brokerAddrs": {str(i): a for i, a in sorted(self.addrs.items())},
                "brokerName": self.broker_name, "cluster": self.cluster}  # fmt: skip


@dataclass
class LiveBroker:
    last_update: float
    ha_server_addr: str
    connection: object  # what the broker registered over (closing it drops the broker)
    data_version: Any = None
    timeout_s: float | None = None  # the broker's own (heartbeatTimeoutMillis), else the table's


@dataclass(frozen=True)
class RegisterResult:
    ha_server_addr: str | None = None
    master_addr: str | None = None


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


class RouteTable:
    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 expiry_s: float = BROKER_EXPIRY_S) -> None:  # fmt: skip
        self.clock = clock
        self.expiry_s = expiry_s
        self.brokers: dict[str, BrokerData] = {}  # broker name ->
        self.clusters: dict[str, set[str]] = {}  # cluster -> broker names
        self.topics: dict[str, dict[str, QueueData]] = {}  # topic -> broker name ->
        self.live: dict[str, LiveBroker] = {}  # broker address ->
        self.kv: dict[str, dict[str, str]] = {}  # namespace -> key -> value

    # --- brokers ---------------------------------------------------------------------------

    def register(
        self,
        cluster: str,
        addr: str,
        name: str,
        broker_id: int,
        ha_addr: str,
        topic_configs: Mapping[str, Mapping[str, Any]] | None,
        connection: object = None,
        data_version: Any = None,
        timeout_s: float | None = None,
    ) -> RegisterResult:
        """A broker's (re-)registration; a master's topic configurations are merged in
        (topics it did not send stay: registrations after ``updateTopic`` hold one topic)."""
        self.clusters.setdefault(cluster, set()).add(name)
        data = self.brokers.get(name)
        if data is None:
            data = self.brokers[name] = BrokerData(cluster, name)
        for other_id, other in list(data.addrs.items()):  # a slave turned master, or back
            if other == addr and other_id != broker_id:
                del data.addrs[other_id]
        data.addrs[broker_id] = addr
        if broker_id == MASTER_ID and topic_configs:
            for topic, config in topic_configs.items():
                self.topics.setdefault(topic, {})[name] = QueueData(
                    _int(config.get("readQueueNums")), _int(config.get("writeQueueNums")),
                    _int(config.get("perm")), _int(config.get("topicSysFlag")),
                )  # fmt: skip
        self.live[addr] = LiveBroker(self.clock(), ha_addr, connection, data_version, timeout_s)
        if broker_id == MASTER_ID:
            return RegisterResult()
        master = data.addrs.get(MASTER_ID)
        if master is None:
            return RegisterResult()
        live = self.live.get(master)
        return RegisterResult(live.ha_server_addr if live else None, master)

    def unregister(self, cluster: str, addr: str, name: str, broker_id: int) -> None:
        self.live.pop(addr, None)
        data = self.brokers.get(name)
        if data is not None and data.addrs.get(broker_id) == addr:
            del data.addrs[broker_id]
        self._drop_if_empty(name)

    def _drop_if_empty(self, name: str) -> None:
        data = self.brokers.get(name)
        if data is not None and data.addrs:
            return
        self.brokers.pop(name, None)
        for cname, names in list(self.clusters.items()):
            names.discard(name)
            if not names:
                del self.clusters[cname]
        for topic, queues in list(self.topics.items()):
            queues.pop(name, None)
            if not queues:
                del self.topics[topic]

    def _drop_address(self, addr: str) -> None:
        self.live.pop(addr, None)
        for name, data in list(self.brokers.items()):
            for broker_id, a in list(data.addrs.items()):
                if a == addr:
                    del data.addrs[broker_id]
            if not data.addrs:
                self._drop_if_empty(name)

    def expire(self) -> list[str]:
        """Drop brokers not registered for their timeout (``expiry_s`` unless they gave one);
        their addresses."""
        now = self.clock()
        gone = [a for a, b in self.live.items()
                if now - b.last_update > (b.timeout_s or self.expiry_s)]  # fmt: skip
        for addr in gone:
            self._drop_address(addr)
        return gone

    def connection_closed(self, connection: object) -> list[str]:
        """Drop the brokers that registered over ``connection``; their addresses."""
        gone = [a for a, b in self.live.items() if b.connection is connection]
        for addr in gone:
            self._drop_address(addr)
        return gone

    def data_version_changed(self, addr: str, data_version: Any) -> bool:
        """QUERY_DATA_VERSION: whether ``data_version`` differs from the registered one (and
        the broker counts as alive again)."""
        live = self.live.get(addr)
        if live is None:
            return True
        live.last_update = self.clock()
        return live.data_version != data_version

    # --- topics ----------------------------------------------------------------------------

    def route(self, topic: str) -> dict[str, Any] | None:
        """TopicRouteData of ``topic`` (standard JSON shape), or None when it has none."""
        queues = self.topics.get(topic)
        if not queues:
            return None
        brokers = [self.brokers[n] for n in sorted(queues) if n in self.brokers]
        if not brokers:
            return None
        route: dict[str, Any] = {
            "brokerDatas": [b.to_json() for b in brokers],
            "filterServerTable": {},
            "queueDatas": [queues[n].to_json(n) for n in sorted(queues)],
        }
        order = self.kv.get("ORDER_TOPIC_CONFIG", {}).get(topic)
        if order is not None:
            route["orderTopicConf"] = order
        return route

    def cluster_info(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {n: b.to_json() for n, b in sorted(self.brokers.items())},
            "clusterAddrTable": {c: sorted(ns) for c, ns in sorted(self.clusters.items())},
        }

    def topic_list(self) -> list[str]:
        return sorted(self.topics)

    def topics_of_cluster(self, cluster: str) -> list[str]:
        names = self.clusters.get(cluster, set())
        return sorted(t for t, qs in self.topics.items() if names & qs.keys())

    def system_topics(self) -> tuple[list[str], str | None]:
        """RocketMQ's "system topics" of a name server: cluster and broker names, and a
        master address to ask for more."""
        topics = sorted(set(self.clusters) | {n for ns in self.clusters.values() for n in ns})
        masters = [b.addrs[MASTER_ID] for b in self.brokers.values() if MASTER_ID in b.addrs]
        return topics, (masters[0] if masters else None)

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        queues = self.topics.get(topic)
        if queues is None:
            return
        if cluster:
            for name in self.clusters.get(cluster, set()):
                queues.pop(name, None)
        else:
            queues.clear()
        if not queues:
            del self.topics[topic]

    def change_write_perm(self, broker_name: str, writable: bool) -> int:
        """WIPE_/ADD_WRITE_PERM_OF_BROKER: the number of topics changed."""
        changed = 0
        for queues in self.topics.values():
            q = queues.get(broker_name)
            if q is not None:
                q.perm = q.perm | PERM_WRITE if writable else q.perm & ~PERM_WRITE
                changed += 1
        return changed

    # --- KV configuration --------------------------------------------------------------------

    def put_kv(self, namespace: str, key: str, value: str) -> None:
        self.kv.setdefault(namespace, {})[key] = value

    def get_kv(self, namespace: str, key: str) -> str | None:
        return self.kv.get(namespace, {}).get(key)

    def delete_kv(self, namespace: str, key: str) -> None:
        table = self.kv.get(namespace)
        if table is not None:
            table.pop(key, None)
            if not table:
                del self.kv[namespace]

    def kv_list(self, namespace: str) -> dict[str, str] | None:
        return dict(self.kv[namespace]) if namespace in self.kv else None


def topic_configs(body: Any) -> Mapping[str, Mapping[str, Any]]:
    """The ``topicConfigTable`` of a REGISTER_BROKER body (``{}`` when it has none)."""
    if not isinstance(body, dict):
        return {}
    wrapper = body.get("topicConfigSerializeWrapper") or {}
    table = wrapper.get("topicConfigTable") if isinstance(wrapper, dict) else None
    if not isinstance(table, dict):
        return {}
    return {str(t): c for t, c in table.items() if isinstance(c, dict)}


def data_version(body: Any) -> Any:
    if not isinstance(body, dict):
        return None
    wrapper = body.get("topicConfigSerializeWrapper") or {}
    return wrapper.get("dataVersion") if isinstance(wrapper, dict) else None
