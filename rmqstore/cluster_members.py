"""Who the other brokers of the cluster are: a service of each broker (its query service, its
RocketMQ 5 proxy) writes its own entry into the name servers' KV configuration and reads
everyone's from there.

Namespace ``rmqstore.<service>.<cluster>`` (``rmqstore.query.C``, ``rmqstore.proxy.C``), key
the broker name, value JSON ``{"address": "HOST:PORT", "storeHost": "IP:PORT"}`` (where that
service of the broker is reached, and the store host its records and offset message ids
carry). Written at start and every ``INTERVAL_S`` (a name
server keeps it in memory, so one restarted learns it again within that time). An entry is
never removed when its broker stops: a broker that is down stays a member and is reported
``unreachable`` — the answer says it is partial instead of leaving a silent gap. A broker
taken out of the cluster for good is removed with ``mqadmin deleteKvConfig -s
rmqstore.<service>.<cluster> -k <broker name>``.
"""

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from rmqstore.formats import remoting as R
from rmqstore.remoting_net import RemotingClient, RemotingError

log = logging.getLogger("rmqstore.cluster")
NAMESPACE = "rmqstore.{service}.{cluster}"
INTERVAL_S = 30.0
TIMEOUT_S = 3.0
RETRY_FIRST_S = 0.5
FRESH_S = 5.0  # members read from the name servers are used this long


@dataclass(frozen=True, order=True)
class Peer:
    name: str  # broker name
    address: str  # where the service is reached, HOST:PORT
    store_host: str = ""  # the store host of its records, IP:PORT
    store_hosts: tuple[str, ...] = ()  # every store host its records have carried


def parse_peer(name: str, value: str) -> Peer | None:
    try:
        doc = json.loads(value)
        hosts = doc.get("storeHosts", [])
        return Peer(name, str(doc["address"]), str(doc.get("storeHost", "")),
                    tuple(str(h) for h in hosts) if isinstance(hosts, list) else ())  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


class PeerBook:
    """This broker's entry kept in the name servers, and the cluster's members read back."""

    def __init__(self, namesrvs: list[str], service: str, cluster: str, me: Peer,
                 interval_s: float = INTERVAL_S, fresh_s: float = FRESH_S,
                 store_hosts: Callable[[], list[str]] | None = None) -> None:  # fmt: skip
        self.clients = [RemotingClient(a) for a in namesrvs]
        self.namespace = NAMESPACE.format(service=service, cluster=cluster)
        self.me = me
        self.store_hosts = store_hosts  # read again before each announcement
        self.interval_s = interval_s
        self.fresh_s = fresh_s
        self._task: asyncio.Task[None] | None = None
        self._refreshing = asyncio.Lock()
        self._view: tuple[list[Peer], list[str]] | None = None
        self._read_at = 0.0

    async def announce(self) -> bool:
        if self.store_hosts is not None:
            self.me = dataclasses.replace(self.me, store_hosts=tuple(self.store_hosts()))
        doc: dict[str, object] = {"address": self.me.address, "storeHost": self.me.store_host}
        if self.me.store_hosts:
            doc["storeHosts"] = list(self.me.store_hosts)
        value = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        ext = {"namespace": self.namespace, "key": self.me.name, "value": value}
        done = await asyncio.gather(*(self._put(c, ext) for c in self.clients))
        return all(done)

    async def _put(self, client: RemotingClient, ext: dict[str, str]) -> bool:
        cmd = R.Command(code=R.RequestCode.PUT_KV_CONFIG, ext=dict(ext))
        try:
            answer = await client.invoke(cmd, TIMEOUT_S)
        except RemotingError as e:  # serve starts its name server after the query service
            log.info("cannot announce this broker to %s (tried again): %s",
                     client.address, e)  # fmt: skip
            return False
        if answer.code != R.ResponseCode.SUCCESS:
            log.warning("the name server %s refused this broker's entry: %s",
                        client.address, answer.remark)  # fmt: skip
            return False
        return True

    async def peers(self) -> tuple[list[Peer], list[str]]:
        """Every member (this broker included), by name; and the name servers that could not
        be asked. Entries of all name servers are merged (one that restarted may lack some).
        Read again at most every ``fresh_s`` (a name server that does not answer costs its
        timeout once per refresh, not once per lookup); when none answers, the last members
        read are kept."""
        async with self._refreshing:
            if self._view is not None and time.monotonic() - self._read_at < self.fresh_s:
                return self._view
            found = await asyncio.gather(*(self._list(c) for c in self.clients))
            members: dict[str, Peer] = {self.me.name: self.me}
            failed = []
            for client, table in zip(self.clients, found, strict=True):
                if table is None:
                    failed.append(client.address)
                    continue
                for name, value in table.items():
                    peer = parse_peer(name, value)
                    if peer is not None and name != self.me.name:
                        members.setdefault(name, peer)
            if len(failed) == len(self.clients) and self._view is not None:
                members = {p.name: p for p in self._view[0]}  # none answered: as last read
            self._view = (sorted(members.values()), failed)
            self._read_at = time.monotonic()
            return self._view

    async def _list(self, client: RemotingClient) -> dict[str, str] | None:
        return await read_entries(client, self.namespace)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        retry = RETRY_FIRST_S
        while True:
            if await self.announce():
                retry = RETRY_FIRST_S
                await asyncio.sleep(self.interval_s)
            else:  # soon again, then less often
                await asyncio.sleep(retry)
                retry = min(retry * 2, self.interval_s)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for client in self.clients:
            await client.close()


async def read_entries(client: RemotingClient, namespace: str) -> dict[str, str] | None:
    """One name server's entries of ``namespace`` (broker name -> JSON); None when it could
    not be asked."""
    cmd = R.Command(code=R.RequestCode.GET_KVLIST_BY_NAMESPACE, ext={"namespace": namespace})
    try:
        answer = await client.invoke(cmd, TIMEOUT_S)
    except RemotingError:
        return None
    if answer.code == R.ResponseCode.QUERY_NOT_FOUND:
        return {}
    if answer.code != R.ResponseCode.SUCCESS:
        return None
    try:
        table = R.parse_json_body(answer.body).get("table", {})
    except (R.FrameError, AttributeError):
        return None
    return {str(k): str(v) for k, v in table.items()} if isinstance(table, dict) else None


async def announced(clients: list[RemotingClient], service: str, cluster: str) -> list[Peer]:
    """Every broker's ``service`` of ``cluster`` announced in any of the name servers, by
    name (read only: for tools that are not a member)."""
    namespace = NAMESPACE.format(service=service, cluster=cluster)
    found: dict[str, Peer] = {}
    for table in await asyncio.gather(*(read_entries(c, namespace) for c in clients)):
        for name, value in (table or {}).items():
            peer = parse_peer(name, value)
            if peer is not None:
                found.setdefault(name, peer)
    return sorted(found.values())
