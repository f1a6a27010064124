"""The other brokers' queues of a topic, for QueryRoute and QueryAssignment in a cluster.

Which brokers are live and which queues they have comes from the name servers' route of the
topic (RocketMQ's ``GET_ROUTEINFO_BY_TOPIC``: the remoting brokers register it every 30 s and
a broker is dropped when its connection closes or 120 s after its last registration); where
each broker's proxy is reached comes from the name servers' KV configuration, where every
proxy announces itself (``rmqstore.cluster_members``, service ``proxy``). A broker with no
announced proxy is left out (RocketMQ 5 clients could not reach it). A name server that
cannot be asked leaves the answer at this broker's own queues (logged).
"""

import logging
import time
from typing import Any

from rmqstore.cluster_members import PeerBook
from rmqstore.formats.topics_json import PERM_READ, PERM_WRITE
from rmqstore.name_servers import MASTER_ID, NameServerError, NameServers
from rmqstore.rocketmq import definition_pb2 as pb
from services.proxy.routes import broker_queues, endpoints

log = logging.getLogger("rmqstore.proxy")
TIMEOUT_S = 3.0
CACHE_S = 2.0  # clients ask for routes every 30 s; a burst of them asks the name server once


def queues_of_route(topic: str, route: dict[str, Any], proxies: dict[str, str],
                    types: list) -> list[pb.MessageQueue]:  # fmt: skip
    """The queues of a name server's TopicRouteData whose broker has a master registered
    and an announced proxy."""
    live = {b.get("brokerName") for b in route.get("brokerDatas", [])
            if MASTER_ID in {str(k) for k in (b.get("brokerAddrs") or {})}}  # fmt: skip
    out: list[pb.MessageQueue] = []
    for q in sorted(route.get("queueDatas", []), key=lambda q: str(q.get("brokerName"))):
        name = str(q.get("brokerName"))
        if name not in live or name not in proxies:
            continue
        perm = int(q.get("perm", 0))
        broker = pb.Broker(name=name, id=0, endpoints=endpoints(proxies[name]))
        out += broker_queues(topic, broker, int(q.get("readQueueNums", 0)),
                             int(q.get("writeQueueNums", 0)), bool(perm & PERM_READ),
                             bool(perm & PERM_WRITE), types)  # fmt: skip
    return out


class ClusterRoutes:
    def __init__(self, namesrvs: list[str], book: PeerBook) -> None:
        self.namesrvs = NameServers(namesrvs, TIMEOUT_S)
        self.book = book
        self._cache: dict[str, tuple[float, dict[str, Any] | None]] = {}

    async def _route(self, topic: str) -> dict[str, Any] | None:
        hit = self._cache.get(topic)
        if hit is not None and time.monotonic() - hit[0] < CACHE_S:
            return hit[1]
        try:
            route = await self.namesrvs.route(topic)
        except NameServerError:  # each name server's failure is logged
            route = None
        self._cache[topic] = (time.monotonic(), route)
        return route

    async def queues(self, topic: str, types: list) -> list[pb.MessageQueue]:
        route = await self._route(topic)
        if not isinstance(route, dict):
            return []
        peers, _failed = await self.book.peers()
        return queues_of_route(topic, route, {p.name: p.address for p in peers}, types)

    async def close(self) -> None:
        await self.namesrvs.close()
