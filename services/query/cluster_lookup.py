"""Cluster-wide lookups: the query service that receives a ``SCOPE_CLUSTER`` request asks
every member of the cluster (itself included) in parallel, within the caller's deadline, and
merges their answers.

By key: each broker answers its own newest-first page of at most ``limit`` matches; the pages
are merged newest first (store time, then broker name, then physical offset, descending) and
the limit is applied once, globally. A broker with more to come bounds what may be taken
from the others: nothing of theirs older than its last message, or the merged order would
break on the next page. The cursor holds every broker's position (its own cursor and, when
the page ended inside its answer, the physical offset below which it resumes), so a page
never repeats a message and every message comes once.

Every answer says, per broker, ``ok``, ``unreachable``, ``timeout`` or ``failed``, and is
``partial`` when any broker did not answer: never a silent gap. A broker that did not answer
keeps its position in the cursor and is asked again on the next page.

By id: an offset message id goes to the one broker whose store host it names, now or before
(``rmqstore/store_hosts.py``; the others are ``not asked``); a UNIQ_KEY (or an offset id
naming no member) goes to every broker, and every match is returned (a retry or a dead
letter of a message may be on another broker).
"""

import asyncio
import base64
import binascii
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from rmqstore.cluster_members import Peer
from rmqstore.errors import InvalidArgumentError, StoreError
from rmqstore.formats.hosts import Host, parse_host
from rmqstore.formats.msgid import OFFSET_ID_LENGTHS, decode_offset_msg_id, is_v5_id
from rmqstore.v1 import common_pb2, query_pb2
from services.query import cursor as cursor_fmt
from services.query.index_reader import POS_INF
from services.query.lookup import DEFAULT_LIMIT, MAX_PORT

DEFAULT_DEADLINE_S = 10.0  # when the caller set none
DEADLINE_MARGIN_S = 0.2  # kept to merge and answer before the caller's deadline
CURSOR_VERSION = 1
_HEX = frozenset("0123456789abcdefABCDEF")

# ask(peer, request, timeout seconds) -> an awaitable of the response, which raises
# grpc.aio.AioRpcError / TimeoutError: a gRPC call already made (bounded by its own deadline of
# ``timeout``), or a coroutine (bounded here); the local broker is asked the same way (without
# the network)
Ask = Callable[[Peer, Any, float], Awaitable[Any]]
Members = Callable[[], Awaitable[tuple[list[Peer], list[str]]]]


@dataclass
class Answer:
    peer: Peer
    status: query_pb2.BrokerAnswer = query_pb2.ANSWER_OK
    detail: str = ""
    response: Any = None
    taken: int = 0

    def proto(self) -> query_pb2.BrokerStatus:
        return query_pb2.BrokerStatus(broker_name=self.peer.name, address=self.peer.address,
                                      answer=self.status, detail=self.detail,
                                      messages=self.taken)  # fmt: skip


@dataclass
class ClusterAnswer:
    messages: list[common_pb2.StoredMessage] = field(default_factory=list)
    brokers: list[str] = field(default_factory=list)  # each message's broker
    statuses: list[Answer] = field(default_factory=list)
    truncated: bool = False
    cursor: str = ""
    budget_exhausted: bool = False
    hops: int = 0

    @property
    def partial(self) -> bool:
        return any(a.status not in (query_pb2.ANSWER_OK, query_pb2.ANSWER_NOT_ASKED)
                   for a in self.statuses)  # fmt: skip


# --- the cursor -------------------------------------------------------------------------------
# per broker name: [its own cursor, below physical offset] while it has more, null when done

State = dict[str, list[Any] | None]


def encode_cursor(qhash: bytes, state: State) -> str:
    doc = {"v": CURSOR_VERSION, "q": qhash.hex(), "b": state}
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str, qhash: bytes) -> State:
    try:
        doc = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        state = doc["b"]
        ok = doc["v"] == CURSOR_VERSION and isinstance(state, dict) and all(
            v is None or (isinstance(v, list) and len(v) == 2 and isinstance(v[0], str)
                          and isinstance(v[1], int) and v[1] >= 0)
            for v in state.values())  # fmt: skip
    except (binascii.Error, ValueError, KeyError, TypeError) as e:
        raise InvalidArgumentError(f"cluster cursor {text[:40]!r} is malformed") from e
    if not ok:
        raise InvalidArgumentError(f"cluster cursor {text[:40]!r} is malformed")
    if doc["q"] != qhash.hex():
        raise InvalidArgumentError(
            "cursor belongs to another query (topic, key, begin and end must be the same)")
    return state


# --- fan-out ---------------------------------------------------------------------------------


async def _ask_all(ask: Ask, jobs: list[tuple[Peer, Any]], timeout: float) -> list[Answer]:
    """Every broker's answer, in the order of ``jobs``. All are asked before any is awaited:
    a gRPC call is under way once made (and ends by its own deadline), a coroutine (a peer
    asked over its stream, this broker's own part) runs as a task meanwhile, bounded by the
    same deadline inside the task (no ``wait_for``: a future, a timer and a loop turn less
    per broker)."""
    deadline = asyncio.get_running_loop().time() + timeout
    made = [ask(peer, request, timeout) for peer, request in jobs]
    pending = [asyncio.ensure_future(_bounded(a, deadline)) if asyncio.iscoroutine(a) else a
               for a in made]  # fmt: skip
    answers: list[Answer] = []
    try:
        for (peer, _request), waiting in zip(jobs, pending, strict=True):
            answers.append(await _answer(peer, waiting, timeout))
    except BaseException:  # cancelled: nothing left running
        for waiting in pending[len(answers) :]:
            cancel = getattr(waiting, "cancel", None)
            if cancel is not None:
                cancel()
        raise
    return answers


async def _bounded(coro: Awaitable[Any], deadline: float) -> Any:
    async with asyncio.timeout_at(deadline):
        return await coro


async def _answer(peer: Peer, waiting: Awaitable[Any], timeout: float) -> Answer:
    """One broker's answer, its failure named."""
    try:
        return Answer(peer, response=await waiting)
    except TimeoutError:
        return Answer(peer, query_pb2.ANSWER_TIMEOUT, f"no answer within {timeout:.1f} s")
    except StoreError as e:  # this broker's own part
        if e.grpc_status == "NOT_FOUND":
            return Answer(peer, response=None, detail=str(e))
        return Answer(peer, query_pb2.ANSWER_FAILED, f"{e.grpc_status}: {e}")
    except grpc.aio.AioRpcError as e:
        code = e.code()
        if code == grpc.StatusCode.NOT_FOUND:  # the topic has no message on that broker
            return Answer(peer, response=None, detail=e.details() or "")
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return Answer(peer, query_pb2.ANSWER_TIMEOUT, f"no answer within {timeout:.1f} s")
        if code == grpc.StatusCode.UNAVAILABLE:
            return Answer(peer, query_pb2.ANSWER_UNREACHABLE, e.details() or "unavailable")
        return Answer(peer, query_pb2.ANSWER_FAILED, f"{code.name}: {e.details()}")


def fanout_timeout(time_remaining: float | None) -> float:
    """Seconds each broker gets: the caller's deadline less a margin to merge and answer."""
    if time_remaining is None:
        return DEFAULT_DEADLINE_S
    return max(time_remaining - DEADLINE_MARGIN_S, 0.05)


class ClusterLookup:
    def __init__(self, members: Members, ask: Ask) -> None:
        self.members = members
        self.ask = ask

    async def _members(self) -> list[Peer]:
        peers, _failed = await self.members()
        return peers

    # -- by key --------------------------------------------------------------------------------
    async def by_key(self, request: query_pb2.QueryByKeyRequest, timeout: float
                     ) -> ClusterAnswer:  # fmt: skip
        if request.begin_timestamp < 0:
            raise InvalidArgumentError(f"begin timestamp {request.begin_timestamp} is negative")
        if request.max_results < 0:
            raise InvalidArgumentError(f"max results {request.max_results} is negative")
        if request.end_timestamp and request.end_timestamp < request.begin_timestamp:
            raise InvalidArgumentError(f"begin timestamp {request.begin_timestamp} is after "
                                       f"end timestamp {request.end_timestamp}")  # fmt: skip
        limit = request.max_results or DEFAULT_LIMIT
        end = request.end_timestamp or POS_INF
        qhash = cursor_fmt.query_hash(request.topic, request.key, request.begin_timestamp, end)
        peers = await self._members()
        state: State = (decode_cursor(request.cursor, qhash) if request.cursor
                        else {p.name: ["", 0] for p in peers})  # fmt: skip
        known = {p.name: p for p in peers}
        answer = ClusterAnswer()
        jobs = []
        for name in sorted(state):
            pos = state[name]
            peer = known.get(name, Peer(name, ""))
            if name not in known:
                answer.statuses.append(Answer(peer, query_pb2.ANSWER_UNREACHABLE,
                                              "no longer registered in the cluster"))
            elif pos is None:
                answer.statuses.append(Answer(peer, query_pb2.ANSWER_OK, "done"))
            else:
                sub = query_pb2.QueryByKeyRequest(
                    topic=request.topic, key=request.key,
                    begin_timestamp=request.begin_timestamp,
                    end_timestamp=request.end_timestamp, max_results=limit, cursor=pos[0],
                    below_phy_offset=pos[1])  # fmt: skip
                jobs.append((peer, sub))
        for p in peers:
            if p.name not in state:
                answer.statuses.append(Answer(p, query_pb2.ANSWER_NOT_ASKED,
                                              "joined after this query's first page"))
        asked = await _ask_all(self.ask, jobs, timeout)
        answer.statuses.extend(asked)
        answer.statuses.sort(key=lambda a: a.peer.name)
        new_state = dict(state)
        _merge_key_pages(asked, limit, state, new_state, answer)
        more = any(new_state.get(a.peer.name) is not None for a in asked
                   if a.status == query_pb2.ANSWER_OK)  # fmt: skip
        if more:
            answer.truncated = True
            answer.cursor = encode_cursor(qhash, new_state)
        return answer

    # -- by id ---------------------------------------------------------------------------------
    async def by_id(self, request: query_pb2.QueryByIdRequest, timeout: float) -> ClusterAnswer:
        msg_id = request.id
        if not is_v5_id(msg_id) and (len(msg_id) not in OFFSET_ID_LENGTHS
                                     or not set(msg_id) <= _HEX):  # fmt: skip
            raise InvalidArgumentError(  # refused here, not once per broker
                f"message id {msg_id[:80]!r} is not 32, 34 (RocketMQ 5) or 56 hexadecimal "
                "characters")
        peers = await self._members()
        target = _owner(request.id, peers)
        sub = query_pb2.QueryByIdRequest(id=request.id, topic=request.topic)
        asked_peers = [target] if target is not None else peers
        asked = await _ask_all(self.ask, [(p, sub) for p in asked_peers], timeout)
        answer = ClusterAnswer()
        answer.statuses = asked + [Answer(p, query_pb2.ANSWER_NOT_ASKED,
                                          "the offset message id names another broker")
                                   for p in peers if p not in asked_peers]  # fmt: skip
        answer.statuses.sort(key=lambda a: a.peer.name)
        found = []
        for a in asked:
            if a.status == query_pb2.ANSWER_OK and a.response is not None:
                a.taken = len(a.response.messages)
                found += [(m, a.peer.name) for m in a.response.messages]
        found.sort(key=lambda x: (-x[0].store_timestamp, x[1], -x[0].phy_offset))
        answer.messages = [m for m, _ in found]
        answer.brokers = [b for _, b in found]
        return answer


def _owner(msg_id: str, peers: list[Peer]) -> Peer | None:
    """The member whose store host an offset message id names: its current one, else one
    its store had before (only when a single member had it). None: a UNIQ_KEY, or a store
    host no member has (or several had): asked of every member."""
    if is_v5_id(msg_id) or len(msg_id) not in OFFSET_ID_LENGTHS or not set(msg_id) <= _HEX:
        return None
    ip, port, offset = decode_offset_msg_id(msg_id)
    if not 0 <= port <= MAX_PORT or offset < 0:
        return None
    host = Host(ip, port)
    for p in peers:
        if _is_host(p.store_host, host):
            return p
    had = [p for p in peers if any(_is_host(h, host) for h in p.store_hosts)]
    return had[0] if len(had) == 1 else None


def _is_host(text: str, host: Host) -> bool:
    try:
        return bool(text) and parse_host(text) == host
    except ValueError:
        return False


def _merge_key_pages(asked: list[Answer], limit: int, state: State, new_state: State,
                     answer: ClusterAnswer) -> None:  # fmt: skip
    """Take at most ``limit`` of the brokers' pages, newest first, and move each broker's
    position past what was taken of it."""
    entries = []
    cutoff: tuple[int, str, int] | None = None  # nothing ordered after this may be taken
    for a in asked:
        if a.status != query_pb2.ANSWER_OK:
            continue
        resp = a.response
        msgs = list(resp.messages) if resp is not None else []
        for m in msgs:
            entries.append(((-m.store_timestamp, a.peer.name, -m.phy_offset), m, a))
        if resp is not None:
            answer.budget_exhausted |= resp.budget_exhausted
            answer.hops += resp.chain_hops
        if resp is not None and resp.truncated:  # it has more, all after its last message
            last = msgs[-1] if msgs else None
            bound = ((-last.store_timestamp, a.peer.name, -last.phy_offset) if last
                     else (-POS_INF, "", -POS_INF))  # fmt: skip
            cutoff = bound if cutoff is None else min(cutoff, bound)
    entries.sort(key=lambda e: e[0])
    last_taken: dict[str, int] = {}
    for key, m, a in entries:
        if len(answer.messages) >= limit or (cutoff is not None and key > cutoff):
            break
        answer.messages.append(m)
        answer.brokers.append(a.peer.name)
        a.taken += 1
        last_taken[a.peer.name] = m.phy_offset
    for a in asked:
        if a.status != query_pb2.ANSWER_OK:
            continue
        name = a.peer.name
        resp = a.response
        n = len(resp.messages) if resp is not None else 0
        if a.taken == n:  # all of its page: on from where it stopped
            more = resp is not None and resp.truncated
            new_state[name] = [resp.cursor, 0] if more else None
        elif a.taken:  # part of its page: the same page again, below the last one taken
            pos = state[name]
            assert pos is not None
            new_state[name] = [pos[0], last_taken[name]]
        # none of it taken: its position stays
