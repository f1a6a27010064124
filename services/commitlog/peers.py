"""A master that finds a newer master among its peers starts as that master's slave.

Kubernetes and service managers restart a writer with the command line it was first given:
a former master whose slave was promoted in its place would come back as a second master of
another history. Given ``--ha-peers`` (the writer gRPC addresses of the other members of its
broker group), a writer about to start as a master asks each peer for its role and master
terms (``GetTerms``) and its HA port (``GetStatus``) first, each with a short deadline; a
peer that does not answer is skipped, so a node alone still starts.

A peer that is a master of a later master term than the last one this store was a master
in (``Terms.mastered``; -1 for a store that never was one, which so follows any master) was
promoted after this store was a master: this writer starts as its slave instead, at the peer's HA
port on the host of its ``--ha-peers`` address, and rejoins it as any former master does
(``rejoin.py``: its unreplicated tail goes into ``rmqstore/quarantine/``). With several,
the latest term wins; two masters of that same term (a promotion forced while a master
still took puts) refuse the start: following either would hide the conflict. A master of
this store's own term or an earlier one changes nothing.
"""

import dataclasses
import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

import grpc

from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc
from services.commitlog.config import SLAVE, master_address

log = logging.getLogger(__name__)
PEER_TIMEOUT_S = 2.0  # per call: a peer slower than this is skipped


class PeerConflict(Exception):
    """The peers name no one master to follow, and starting as a master would be wrong."""


@dataclasses.dataclass(frozen=True)
class Peer:
    address: str  # its writer's gRPC address, as given to --ha-peers
    role: str  # async_master, sync_master or slave
    term: int  # its last master term (0: never promoted, nor following a promoted master)
    ha_port: int  # 0: no HA listener

    @property
    def ha_address(self) -> str:
        """Its HA port on the host of its gRPC address."""
        return f"{self.address.rsplit(':', 1)[0]}:{self.ha_port}"


def parse(text: str) -> list[str]:
    """``--ha-peers HOST:PORT,...``; ValueError naming a malformed one."""
    out = [a.strip() for a in text.split(",") if a.strip()]
    for a in out:
        try:
            master_address(a)
        except ValueError:
            raise ValueError(f"--ha-peers takes HOST:PORT,..., not {a!r}") from None
    return out


def own_term(mine: int) -> str:
    """``mine`` (the last term this store was a master in) in words."""
    return "this store, never a master" if mine < 0 else f"this store's last as a master, {mine}"


def newer_master(my_term: int, peers: Iterable[Peer]) -> Peer | None:
    """The master to follow instead of starting as one: the peer master of the latest term
    later than ``my_term``; None when there is none (start as a master)."""
    newer = [p for p in peers if p.role != SLAVE and p.term > my_term]
    if not newer:
        return None
    latest = max(p.term for p in newer)
    top = [p for p in newer if p.term == latest]
    if len(top) > 1:
        raise PeerConflict(
            f"{' and '.join(p.address for p in top)} are all masters of master term {latest}, "
            f"later than {own_term(my_term)}: two masters of one term take puts into two "
            "histories. Stop all but one (start the others as its slaves with --role slave "
            "--demote), then start this writer again")  # fmt: skip
    if not top[0].ha_port:
        raise PeerConflict(
            f"{top[0].address} is {top[0].role} of master term {latest}, later than "
            f"{own_term(my_term)}, but takes no slaves (no HA port): this store must not start "
            "as a second master; give that writer --ha-port, then start this one again")
    return top[0]


def ask(address: str, open_channel: Callable[[str], grpc.Channel] = channel,
        timeout: float = PEER_TIMEOUT_S) -> Peer | None:  # fmt: skip
    """What the writer at ``address`` is; None if it did not answer in time."""
    try:
        with open_channel(address) as ch:
            stub = commitlog_pb2_grpc.CommitLogStub(ch)
            terms = stub.GetTerms(commitlog_pb2.GetTermsRequest(), timeout=timeout)
            status = stub.GetStatus(commitlog_pb2.GetStatusRequest(), timeout=timeout)
    except grpc.RpcError:
        return None
    term = terms.terms[-1].term if terms.terms else 0
    return Peer(address, terms.role, term, status.replication.ha_port)


def ask_all(addresses: list[str], open_channel: Callable[[str], grpc.Channel] = channel
            ) -> list[Peer]:  # fmt: skip
    """The peers that answered, asked at once (start-up waits for the slowest only)."""
    if not addresses:
        return []
    with ThreadPoolExecutor(max_workers=min(17, len(addresses))) as pool:
        got = list(pool.map(lambda a: ask(a, open_channel), addresses))
    answered = [p for p in got if p is not None]
    log.info("peers: %d of %d answered%s", len(answered), len(addresses),
             "".join(f"; {p.address} {p.role} of master term {p.term}" for p in answered))
    return answered
