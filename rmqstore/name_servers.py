"""Questions to RocketMQ name servers, as a client asks them: the first name server that
answers is taken (``namesrvAddr`` is a list of equals; each broker registers with all).

``route(topic)`` is ``GET_ROUTEINFO_BY_TOPIC``'s TopicRouteData (None: no route), and
``cluster_info()`` ``GET_BROKER_CLUSTER_INFO``'s ClusterInfo::

    {"brokerAddrTable": {NAME: {"cluster": C, "brokerName": NAME,
                                "brokerAddrs": {"0": MASTER, "1": SLAVE, ...}}},
     "clusterAddrTable": {C: [NAME, ...]}}

Both raise ``NameServerError`` when no name server could be asked.
"""

import logging
from typing import Any

from rmqstore.formats import remoting as R
from rmqstore.remoting_net import RemotingClient, RemotingError

log = logging.getLogger("rmqstore.namesrv")
TIMEOUT_S = 3.0
MASTER_ID = "0"


class NameServerError(Exception):
    """No name server answered."""


class NameServers:
    def __init__(self, addresses: list[str], timeout_s: float = TIMEOUT_S) -> None:
        self.clients = [RemotingClient(a) for a in addresses]
        self.timeout_s = timeout_s

    async def _ask(self, cmd: R.Command) -> R.Command:
        errors = []
        for client in self.clients:
            try:
                return await client.invoke(cmd, self.timeout_s)
            except RemotingError as e:
                log.warning("cannot ask the name server %s: %s", client.address, e)
                errors.append(f"{client.address}: {e}")
        raise NameServerError("no name server answered (" + "; ".join(errors) + ")")

    async def route(self, topic: str) -> dict[str, Any] | None:
        cmd = R.Command(code=R.RequestCode.GET_ROUTEINFO_BY_TOPIC, ext={"topic": topic})
        answer = await self._ask(cmd)
        if answer.code != R.ResponseCode.SUCCESS:
            return None
        try:
            route = R.parse_json_body(answer.body)
        except R.FrameError:
            return None
        return route if isinstance(route, dict) else None

    async def cluster_info(self) -> dict[str, Any]:
        answer = await self._ask(R.Command(code=R.RequestCode.GET_BROKER_CLUSTER_INFO))
        if answer.code != R.ResponseCode.SUCCESS:
            raise NameServerError(f"cluster info refused: {answer.remark}")
        try:
            info = R.parse_json_body(answer.body)
        except R.FrameError as e:
            raise NameServerError(f"cluster info unreadable: {e}") from None
        return info if isinstance(info, dict) else {}

    async def close(self) -> None:
        for client in self.clients:
            await client.close()


def master_of(info: dict[str, Any], broker: str) -> str | None:
    """The address of ``broker``'s master in cluster info, None when only slaves (or nothing)
    are registered (fastjson writes the ids as bare numbers; they are read as strings here)."""
    entry = (info.get("brokerAddrTable") or {}).get(broker) or {}
    addrs = {str(k): v for k, v in (entry.get("brokerAddrs") or {}).items()}
    return str(addrs[MASTER_ID]) if MASTER_ID in addrs else None


def masters(info: dict[str, Any], cluster: str) -> dict[str, str]:
    """Broker name -> its master's address, for the brokers of ``cluster`` with a master
    registered."""
    out = {}
    for name in (info.get("clusterAddrTable") or {}).get(cluster) or []:
        if (address := master_of(info, name)) is not None:
            out[str(name)] = address
    return out


def pick_cluster(info: dict[str, Any], wanted: str = "") -> str:
    """``wanted`` if the name server knows it, else the only cluster it knows; LookupError
    (unknown cluster) or ValueError (several, none named) saying which there are."""
    clusters = sorted((info.get("clusterAddrTable") or {}).keys())
    known = ", ".join(clusters) or "none"
    if wanted:
        if wanted not in clusters:
            raise LookupError(f"cluster {wanted!r} is not registered with the name server "
                              f"(clusters: {known})")  # fmt: skip
        return wanted
    if len(clusters) != 1:
        raise ValueError(f"--cluster: the name server knows {len(clusters)} clusters ({known}); "
                         "name one")  # fmt: skip
    return clusters[0]
