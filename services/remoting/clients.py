"""Who is connected: producer and consumer groups announced by HEART_BEAT, each member with
its connection (the broker sends CHECK_TRANSACTION_STATE to a producer's). A member leaves
on UNREGISTER_CLIENT, when its connection closes, or ``EXPIRY_S`` after its last heartbeat.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

EXPIRY_S = 120.0


@dataclass
class Member:
    client_id: str
    connection: Any
    language: str
    version: int
    last_seen: float
    subscriptions: dict[str, dict[str, Any]] = field(default_factory=dict)  # topic ->
    consume: dict[str, str] = field(default_factory=dict)  # consumeType, messageModel, …


class Clients:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.producers: dict[str, dict[Any, Member]] = {}  # group -> connection ->
        self.consumers: dict[str, dict[Any, Member]] = {}

    def heartbeat(self, connection: Any, body: dict[str, Any], language: str, version: int) -> None:
        client_id = str(body.get("clientID", ""))
        now = self.clock()
        for p in body.get("producerDataSet") or ():
            group = str(p.get("groupName", ""))
            self.producers.setdefault(group, {})[connection] = Member(
                client_id, connection, language, version, now
            )
        for c in body.get("consumerDataSet") or ():
            group = str(c.get("groupName", ""))
            subs = {str(s.get("topic")): s for s in c.get("subscriptionDataSet") or ()}
            consume = {
                k: str(c[k]) for k in ("consumeType", "messageModel", "consumeFromWhere") if k in c
            }
            self.consumers.setdefault(group, {})[connection] = Member(
                client_id, connection, language, version, now, subs, consume
            )

    def unregister(
        self, connection: Any, producer_group: str | None, consumer_group: str | None
    ) -> None:
        for table, group in ((self.producers, producer_group), (self.consumers, consumer_group)):
            if group and group in table:
                table[group].pop(connection, None)
                if not table[group]:
                    del table[group]

    def connection_closed(self, connection: Any) -> None:
        for table in (self.producers, self.consumers):
            for group in list(table):
                table[group].pop(connection, None)
                if not table[group]:
                    del table[group]

    def expire(self) -> None:
        limit = self.clock() - EXPIRY_S
        for table in (self.producers, self.consumers):
            for group in list(table):
                members = table[group]
                for conn in [c for c, m in members.items() if m.last_seen < limit]:
                    del members[conn]
                if not members:
                    del table[group]

    def producer(self, group: str) -> Member | None:
        """A live member of a producer group (for a transaction check), or None."""
        members = self.producers.get(group)
        if not members:
            return None
        return max(members.values(), key=lambda m: m.last_seen)

    def groups_of_topic(self, topic: str) -> list[str]:
        """Consumer groups subscribed to ``topic``."""
        return sorted(
            g
            for g, ms in self.consumers.items()
            if any(topic in m.subscriptions for m in ms.values())
        )
