"""The broker's permission, RocketMQ's ``brokerPermission``: 6 (read and write) or 4
(read-only: a drained broker, ``docs/cluster.md``, "Draining a broker").

The writer's process keeps it in ``config/brokerPermission.json`` (``PermissionFile``, its
one writer, behind the ``Topics`` service's Get/SetBrokerPermission); the remoting front end
sets it (``UPDATE_BROKER_CONFIG``), clears the write bit of the topics it registers while it
is read-only and refuses sends; the proxy lists its queues READ in QueryRoute and refuses
sends. Both read it through ``PermissionReader``, which asks the writer again at most every
``CACHE_S`` (and the remoting broker before every registration).
"""

import asyncio
import json
import logging
import threading
import time
from pathlib import Path

import grpc

from rmqstore import durable
from rmqstore.errors import InvalidArgumentError, ReadOnlyError
from rmqstore.formats.topics_json import PERM_INHERIT, PERM_READ, PERM_READ_WRITE, PERM_WRITE
from rmqstore.v1 import topics_pb2, topics_pb2_grpc

log = logging.getLogger("rmqstore")
READ_WRITE = PERM_READ_WRITE
READ_ONLY = PERM_READ
VALUES = (READ_ONLY, READ_WRITE)
NAMES = {READ_WRITE: "read-write", READ_ONLY: "read-only"}
FILE = "brokerPermission.json"
CACHE_S = 2.0


def check(perm: int) -> int:
    if perm not in VALUES:
        raise InvalidArgumentError(f"broker permission {perm} is not 6 (read-write) or 4 "
                                   "(read-only)")  # fmt: skip
    return perm


def masked(topic_perm: int, broker_perm: int) -> int:
    """A topic's perm as the broker registers it: its read and write bits limited by the
    broker's (the inherit bit kept)."""
    return topic_perm & (broker_perm | PERM_INHERIT)


def writable(broker_perm: int) -> bool:
    return bool(broker_perm & PERM_WRITE)


def decode(data: bytes) -> int:
    """The permission a ``brokerPermission.json`` holds (``{"brokerPermission": 4}``)."""
    got = json.loads(data)
    perm = got.get("brokerPermission") if isinstance(got, dict) else None
    if perm not in VALUES:
        raise ValueError(f"brokerPermission is not 6 or 4: {perm!r}")
    return int(perm)


class PermissionFile:
    """``config/brokerPermission.json`` (``{"brokerPermission": 4}``); none: read-write."""

    def __init__(self, root: Path, read_only: bool = False) -> None:
        self.path = Path(root) / "config" / FILE
        self.read_only = read_only
        self._lock = threading.Lock()
        try:
            self.perm: int = decode(self.path.read_bytes())
        except FileNotFoundError:
            self.perm = READ_WRITE
        except ValueError as e:
            raise ValueError(f"{self.path}: {e}") from None

    def set(self, perm: int) -> int:
        check(perm)
        with self._lock:
            if perm == self.perm:
                return perm
            if self.read_only:
                raise ReadOnlyError("the broker permission cannot be changed: this store is "
                                    "served read-only (--read-only)")  # fmt: skip
            durable.replace_file(self.path, json.dumps({"brokerPermission": perm}).encode())
            self.perm = perm
            return perm


class PermissionReader:
    """The broker's permission as the writer holds it. ``current()`` answers from memory and
    reads it again in the background once it is ``CACHE_S`` old (one read at a time, however
    many callers; the first call waits for it); while the writer cannot be asked, the last
    value read (read-write before any). ``refresh()`` reads it now."""

    def __init__(self, channel: grpc.aio.Channel, cache_s: float = CACHE_S) -> None:
        self.stub = topics_pb2_grpc.TopicsStub(channel)
        self.cache_s = cache_s
        self.perm = READ_WRITE
        self._read_at: float | None = None
        self._reading: asyncio.Task[None] | None = None
        self._failing = False  # logged once until the writer answers again
        self._sets = 0  # set() calls begun and ended: a read that saw this change is stale
        self._setting = 0  # set() calls under way

    async def current(self) -> int:
        if self._reading is None and (
                self._read_at is None or time.monotonic() - self._read_at >= self.cache_s):
            self._reading = asyncio.ensure_future(self._read())
        if self._read_at is None and self._reading is not None:
            await asyncio.shield(self._reading)
        return self.perm

    def known(self) -> int | None:
        """``current()`` without waiting: None until the first read has ended (then ask
        ``current``)."""
        if self._read_at is None:
            return None
        if self._reading is None and time.monotonic() - self._read_at >= self.cache_s:
            self._reading = asyncio.ensure_future(self._read())
        return self.perm

    async def _read(self) -> None:
        try:
            await self.refresh()
        except grpc.aio.AioRpcError:
            pass  # logged; the last value holds
        finally:
            self._reading = None

    async def refresh(self) -> int:
        """Ask the writer now; raises ``grpc.aio.AioRpcError`` when it cannot be asked. An
        answer that a ``set`` overtook is dropped (the value set stands)."""
        sets = self._sets
        try:
            got = await self.stub.GetBrokerPermission(topics_pb2.GetBrokerPermissionRequest(),
                                                      timeout=5.0)  # fmt: skip
        except grpc.aio.AioRpcError as e:
            self._read_at = time.monotonic()  # not again at once: the last value holds
            if not self._failing:
                log.warning("broker permission unavailable, %s taken: %s", NAMES[self.perm],
                            e.details())  # fmt: skip
            self._failing = True
            raise
        if sets == self._sets and not self._setting:
            self.perm, self._read_at = got.perm, time.monotonic()
        self._failing = False
        return self.perm

    async def set(self, perm: int) -> int:
        self._sets += 1
        self._setting += 1
        try:
            got = await self.stub.SetBrokerPermission(topics_pb2.BrokerPermission(perm=perm),
                                                      timeout=5.0)  # fmt: skip
        finally:
            self._setting -= 1
            self._sets += 1
        self.perm, self._read_at = got.perm, time.monotonic()
        return self.perm
