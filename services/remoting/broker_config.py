"""The broker's own configuration over remoting: its permission (RocketMQ's
``brokerPermission``, ``rmqstore.broker_perm``), the one key that can be changed.

``UPDATE_BROKER_CONFIG`` (``mqadmin updateBrokerConfig -k brokerPermission -v 4``,
``rmqstore admin set-perm``) has the writer keep the new value, then registers with every
name server before it answers, with each topic's write bit cleared while read-only (as
RocketMQ 4.9 re-registers at once). ``GET_BROKER_CONFIG`` answers the permission, name and
cluster as Java properties.
"""

import json
import logging
import time
from collections.abc import Awaitable, Callable

import grpc

from rmqstore import broker_perm
from rmqstore.errors import InvalidArgumentError
from rmqstore.formats import remoting as R
from rmqstore.remoting_net import Connection

log = logging.getLogger("rmqstore.remoting")
C = R.RequestCode
RC = R.ResponseCode
KEY = "brokerPermission"
TopicTable = dict[str, dict[str, object]]


def parse_properties(body: bytes) -> dict[str, str]:
    """Java ``Properties`` text as mqadmin sends it (``key=value`` lines; ``#``/``!``
    comments; ``:`` also separates)."""
    out = {}
    for raw in body.decode("utf-8", "replace").splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=len(line))
        out[line[:cut].strip()] = line[cut + 1 :].strip()
    return out


class BrokerConfig:
    """``register_now`` registers with every name server (awaited)."""

    def __init__(self, cluster: str, name: str, permission: broker_perm.PermissionReader,
                 register_now: Callable[[], Awaitable[None]]) -> None:  # fmt: skip
        self.cluster, self.name = cluster, name
        self.permission = permission
        self.register_now = register_now

    def handlers(self) -> dict[int, Callable[[Connection, R.Command], Awaitable[R.Command]]]:
        return {C.UPDATE_BROKER_CONFIG: self.update, C.GET_BROKER_CONFIG: self.get}

    def registered(self, topics: Callable[[], Awaitable[TopicTable]]
                   ) -> Callable[[], Awaitable[TopicTable]]:  # fmt: skip
        """``topics`` as registered: the permission read from the writer first (a broker
        that cannot read it skips the round rather than register a drained broker
        writable), each topic's perm limited by it."""

        async def table() -> TopicTable:
            perm = await self.permission.refresh()
            got = await topics()
            if perm == broker_perm.READ_WRITE:
                return got
            return {name: {**config, "perm": broker_perm.masked(int(str(config["perm"])), perm)}
                    for name, config in got.items()}  # fmt: skip

        return table

    async def update(self, conn: Connection, req: R.Command) -> R.Command:
        props = parse_properties(req.body or b"")
        other = sorted(set(props) - {KEY})
        if other or KEY not in props:
            return R.response_to(req, RC.SYSTEM_ERROR, remark=(
                f"only {KEY} can be changed on this broker"
                + (f", not {', '.join(other)}" if other else "")))  # fmt: skip
        try:
            perm = broker_perm.check(int(props[KEY]))
        except (ValueError, InvalidArgumentError):
            return R.response_to(req, RC.SYSTEM_ERROR, remark=(
                f"{KEY} {props[KEY]!r} is not 6 (read-write) or 4 (read-only)"))  # fmt: skip
        try:
            await self.permission.set(perm)
        except grpc.aio.AioRpcError as e:
            return R.response_to(req, RC.SYSTEM_ERROR,
                                 remark=f"{KEY} not changed: {e.details()}")  # fmt: skip
        log.warning("broker permission set to %s by %s", broker_perm.NAMES[perm], conn.remote)
        await self.register_now()
        return R.response_to(req)

    async def get(self, conn: Connection, req: R.Command) -> R.Command:
        perm = await self.permission.current()
        text = f"brokerClusterName={self.cluster}\nbrokerName={self.name}\n{KEY}={perm}\n"
        version = json.dumps({"counter": 0, "timestamp": int(time.time() * 1000)},
                             separators=(",", ":"))  # the header's (required) data version
        return R.response_to(req, ext={"version": version}, body=text.encode())
