"""Connected clients, by ``x-mq-client-id``: what each declared over Telemetry, and its open
stream (the only way to reach a producer, for transaction checks)."""

import asyncio
import time
from dataclasses import dataclass, field

from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.rocketmq import service_pb2 as spb

LANGUAGES = {v: k.lower() for k, v in pb.Language.items()}


@dataclass
class Client:
    client_id: str
    language: str = "unknown"
    client_type: int = pb.CLIENT_TYPE_UNSPECIFIED
    group: str = ""
    topics: set[str] = field(default_factory=set)  # declared publishing topics
    last_seen: float = field(default_factory=time.monotonic)
    started: bool = False  # made a call beyond QueryRoute and Telemetry
    # commands to push on the client's Telemetry stream; None ends the stream
    outbox: asyncio.Queue | None = None

    @property
    def is_producer(self) -> bool:
        return self.client_type == pb.PRODUCER

    def push(self, command: spb.TelemetryCommand) -> bool:
        if self.outbox is None:
            return False
        self.outbox.put_nowait(command)
        return True


class ClientRegistry:
    """Lives on the proxy's event loop (not thread-safe)."""

    def __init__(self, on_change=None) -> None:
        self.clients: dict[str, Client] = {}
        self._on_change = on_change

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self.languages())

    def get(self, client_id: str) -> Client:
        c = self.clients.get(client_id)
        if c is None:
            c = self.clients[client_id] = Client(client_id)
            self._changed()
        c.last_seen = time.monotonic()
        return c

    def settings(self, client_id: str, s: pb.Settings) -> Client:
        c = self.get(client_id)
        if s.HasField("client_type"):
            c.client_type = s.client_type
        if s.HasField("user_agent"):
            c.language = LANGUAGES.get(s.user_agent.language, "unknown")
        if s.HasField("publishing"):
            c.topics = {r.name for r in s.publishing.topics}
        if s.HasField("subscription") and s.subscription.HasField("group"):
            c.group = s.subscription.group.name
        self._changed()
        return c

    def open_stream(self, client_id: str) -> Client:
        c = self.get(client_id)
        if c.outbox is not None:  # a newer stream replaces the old one
            c.outbox.put_nowait(None)
        c.outbox = asyncio.Queue()
        return c

    def close_stream(self, client: Client, outbox: asyncio.Queue) -> None:
        if client.outbox is outbox:
            client.outbox = None

    def connected(self, client_id: str) -> bool:
        """The client's Telemetry stream is open (it is alive)."""
        c = self.clients.get(client_id)
        return c is not None and c.outbox is not None

    def drop(self, client_id: str) -> None:
        c = self.clients.pop(client_id, None)
        if c is not None and c.outbox is not None:
            c.outbox.put_nowait(None)
        self._changed()

    def producer_for(self, topic: str, preferred: str = "") -> Client | None:
        """A producer with an open stream to send a check to: the one that sent the half
        message if it is still there, else one that declared the topic, else any producer."""
        c = self.clients.get(preferred)
        if c is not None and c.outbox is not None:
            return c
        live = [c for c in self.clients.values() if c.outbox is not None and c.is_producer]
        declaring = [c for c in live if topic in c.topics]
        pick = declaring or live
        return max(pick, key=lambda c: c.last_seen) if pick else None

    def languages(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.clients.values():
            out[c.language] = out.get(c.language, 0) + 1
        return out
