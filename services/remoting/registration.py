"""The broker's registration with its name servers (``spec`` §3.1, §4 "Broker ↔ NS"):
REGISTER_BROKER with the whole topic table at start and every 10 s, to every name server at
once, giving a timeout of 20 s (RocketMQ 5's ``heartbeatTimeoutMillis``: a broker that stops
registering leaves the routes within 25 s, the name server scanning every 5 s); again
(oneway) as soon as a send created a topic or an admin changed one; UNREGISTER_BROKER at
shutdown. A name server that does not answer is logged and tried again at the next round."""

import asyncio
import contextlib
import json
import logging
import time
import zlib
from collections.abc import Awaitable, Callable

from rmqstore.formats import remoting as R
from rmqstore.remoting_net import RemotingClient, RemotingError, parse_namesrv

log = logging.getLogger("rmqstore.remoting")
INTERVAL_S = 10.0
TIMEOUT_FACTOR = 2  # the timeout the name servers are given: two intervals
TIMEOUT_S = 6.0  # RocketMQ's registerBrokerTimeoutMills
__all__ = ["Registration", "parse_namesrv"]


class Registration:
    """``topic_table()`` gives ``{topic: TopicConfig as JSON}``."""

    def __init__(
        self,
        namesrvs: list[str],
        broker_name: str,
        broker_addr: str,
        cluster_name: str,
        ha_addr: str,
        topic_table: Callable[[], Awaitable[dict[str, dict[str, object]]]],
        interval_s: float = INTERVAL_S,
    ) -> None:
        self.clients = [RemotingClient(a) for a in namesrvs]
        self.header = {
            "brokerName": broker_name,
            "brokerAddr": broker_addr,
            "clusterName": cluster_name,
            "haServerAddr": ha_addr,
            "brokerId": "0",
            "compressed": "false",
            "heartbeatTimeoutMillis": str(int(interval_s * TIMEOUT_FACTOR * 1000)),
        }
        self.topic_table = topic_table
        self.interval_s = interval_s
        self.counter = 0
        self.registered = 0  # successful registrations (tests, metrics)
        self._task: asyncio.Task[None] | None = None
        self._soon = asyncio.Event()
        # one round at a time: a round that read the topics before a change never lands after
        # the one that read them after it (a drained broker's perms, ``broker_config``)
        self._lock = asyncio.Lock()

    async def _body(self) -> bytes:
        self.counter += 1
        table = await self.topic_table()
        body = {
            "filterServerList": [],
            "topicConfigSerializeWrapper": {
                "dataVersion": {"counter": self.counter, "timestamp": int(time.time() * 1000)},
                "topicConfigTable": table,
            },
        }
        return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()

    async def register_all(self, oneway: bool = False) -> None:
        async with self._lock:
            try:
                body = await self._body()
            except Exception as e:  # the writer's topics unavailable: next round
                log.warning("registration skipped: %s", e)
                return
            ext = {**self.header, "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF)}
            await asyncio.gather(*(self._register(c, ext, body, oneway) for c in self.clients))

    async def _register(
        self, client: RemotingClient, ext: dict[str, str], body: bytes, oneway: bool
    ) -> None:
        cmd = R.Command(code=R.RequestCode.REGISTER_BROKER, ext=dict(ext), body=body)
        try:
            if oneway:
                await client.oneway(cmd)
                return
            answer = await client.invoke(cmd, TIMEOUT_S)
        except RemotingError as e:
            log.warning("cannot register with the name server %s: %s", client.address, e)
            return
        if answer.code != R.ResponseCode.SUCCESS:
            log.warning(
                "the name server %s refused the registration: %s %s",
                client.address,
                R.code_name(answer.code, response=True),
                answer.remark,
            )
            return
        self.registered += 1

    def soon(self) -> None:
        """Register again now (a topic was created or changed)."""
        self._soon.set()

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            await self.register_all()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._soon.wait(), self.interval_s)
            self._soon.clear()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        ext = {k: self.header[k] for k in ("brokerName", "brokerAddr", "clusterName", "brokerId")}
        for client in self.clients:
            try:
                await client.invoke(R.Command(code=R.RequestCode.UNREGISTER_BROKER, ext=ext), 3.0)
            except RemotingError as e:
                log.info("unregistering from %s: %s", client.address, e)
            await client.close()
