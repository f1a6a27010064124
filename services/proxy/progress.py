"""Consumer groups' progress: what each group has settled and what it has in flight, per
queue, kept in memory and made durable by ``ProgressFiles``.

Per (group, topic, queue)::

    committed ─┬─ settled or in flight ─┬─ next ─ never handed out ─▶ max offset
               └ lowest unsettled offset └ pop cursor

Every offset in [committed, next) is either settled (acked, filtered out, copied to the
retry topic, dead-lettered) or in flight (handed out, invisible until ``visible_at``, with
its attempt count). Settling an offset moves ``committed`` over the settled prefix; nothing
below it is ever delivered again. A group's retry topic ``%RETRY%<group>_<topic>`` is kept
here like any topic (its queue 0), so both files hold it as RocketMQ's do.

Durability (the proxy owns these files; each is replaced atomically):

* ``config/consumerOffset.json`` — RocketMQ's file: ``committed`` per queue.
* ``config/popInflight.json`` — ours (strict JSON): per queue ``next``, the settled offsets
  above ``committed`` and each in-flight offset's attempt and visible-at time.

Both are written together every ``flush_interval`` and on a clean stop.

On a node that was (or is) a slave, its writer keeps copies of the master's consumer offsets
and subscription groups in ``rmqstore/replica-config/`` (``services/commitlog/config_copy``).
They are taken in at start: a queue whose copied offset is higher than this node's own
starts there (what the master's consumers settled is not delivered again), a lower one is
ignored (progress never goes back), and groups this node lacks are added. After a crash the
group resumes from the last flush: offsets handed out after it are handed out again (a
redelivery, counted), acks after it are lost (the message comes back once its invisible
time is over) and originals copied to the retry topic after it are copied again (a
duplicate) — nothing below a persisted ``committed`` was unsettled, so nothing is lost.
"""

import fcntl
import itertools
import json
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from rmqstore import durable
from rmqstore.errors import StoreLockedError
from rmqstore.formats import consumer_offsets, subscription_groups
from rmqstore.layout import StoreLayout

log = logging.getLogger(__name__)
INFLIGHT_FILE = "popInflight.json"
OFFSETS_FILE = "consumerOffset.json"
GROUPS_FILE = "subscriptionGroup.json"
LOCK_FILE = "rmqstore/proxy.lock"  # under the store root: held by the proxy that owns config/


@dataclass
class Flight:
    attempt: int  # deliveries so far (1 after the first)
    visible_at: int  # ms; deliverable again from then on
    version: int  # new on every delivery and change: older receipt handles are stale
    # (kept across restarts, so a handle given out before a clean restart still acks)
    phy: int = -1  # commitlog offset (-1: not known yet, e.g. after a restart)
    size: int = 0
    # handed out before a crash, after the last flush: its next delivery is a redelivery
    lost_track: bool = False
    renew_for: str = ""  # a PushConsumer's client id: kept invisible while it lives
    renew_until: int = 0  # ms; renewals stop here
    # its retry copy was refused as bad (it could never be written): redelivered in place
    in_place: bool = False


@dataclass
class QueueProgress:
    committed: int = 0
    next: int = 0
    settled: set[int] = field(default_factory=set)
    inflight: dict[int, Flight] = field(default_factory=dict)

    def settle(self, offset: int) -> bool:
        """Settle ``offset``; True if the committed offset moved."""
        self.inflight.pop(offset, None)
        if offset < self.committed:
            return False
        self.settled.add(offset)
        moved = False
        while self.committed in self.settled:
            self.settled.discard(self.committed)
            self.committed += 1
            moved = True
        return moved

    def reset(self, offset: int) -> None:
        """Start again at ``offset``: forget what is in flight and settled."""
        self.committed = self.next = offset
        self.settled.clear()
        self.inflight.clear()


Key = tuple[str, str]  # (group, topic)


class Rendered(NamedTuple):
    number: int  # renders are numbered in the order they were taken
    inflight: bytes
    offsets: bytes


class ProgressLock:
    """One proxy writes a store's consumer progress: an exclusive ``flock`` on
    ``<store>/rmqstore/proxy.lock``, taken without waiting and held while the proxy runs
    (the kernel drops it when the process ends, however it ends). A second proxy given the
    same ``--store`` is refused at start-up: both would write ``consumerOffset.json`` and
    ``popInflight.json``, each over the other's."""

    def __init__(self, store: Path) -> None:
        path = Path(store) / LOCK_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            self.fd = -1
            raise StoreLockedError(
                f"another proxy already keeps the consumer progress of store {store} ({path} "
                "is locked): one proxy per store"
            ) from None

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # drops the flock
            self.fd = -1


class ProgressFiles:
    """Reads and writes the files under ``<store>/config``."""

    def __init__(self, store: Path) -> None:
        self.dir = Path(store) / "config"
        self.replica_dir = StoreLayout.of(Path(store)).replica_config_dir
        self._renders = itertools.count()
        self._written = -1  # the newest render written: an older one is never written after
        self._lock = threading.Lock()

    def _read(self, name: str) -> str:
        try:
            return (self.dir / name).read_text(encoding="utf-8")
        except FileNotFoundError:
            return ""

    def _read_replica(self, name: str) -> str:
        try:
            return (self.replica_dir / name).read_text(encoding="utf-8")
        except FileNotFoundError:
            return ""

    def load_groups(self) -> subscription_groups.GroupTable:
        table = subscription_groups.parse(self._read(GROUPS_FILE))
        try:
            copied = subscription_groups.parse(self._read_replica(GROUPS_FILE))
        except ValueError as e:
            log.warning("ignoring the master's subscription groups copied in %s: %s",
                        self.replica_dir, e)  # fmt: skip
            return table
        for name, group in copied.groups.items():
            table.groups.setdefault(name, group)
        return table

    def save_groups(self, table: subscription_groups.GroupTable) -> None:
        durable.replace_file(self.dir / GROUPS_FILE, subscription_groups.render(table).encode())

    def load(self) -> tuple[dict[Key, dict[int, QueueProgress]], consumer_offsets.OffsetTable]:
        """Each (group, topic)'s queues as last flushed; also the offsets file as read
        (entries of other brokers' topics are kept and written back)."""
        offsets = consumer_offsets.parse(self._read(OFFSETS_FILE))
        state: dict[Key, dict[int, QueueProgress]] = {}
        for (topic, group), queues in offsets.offsets.items():
            state[(group, topic)] = {
                q: QueueProgress(committed=o, next=o) for q, o in queues.items()
            }
        try:
            copied = consumer_offsets.parse(self._read_replica(OFFSETS_FILE))
        except ValueError as e:
            log.warning("ignoring the master's consumer offsets copied in %s: %s",
                        self.replica_dir, e)  # fmt: skip
            copied = consumer_offsets.OffsetTable()
        for (topic, group), queues in copied.offsets.items():
            ours = state.setdefault((group, topic), {})
            for q, o in queues.items():
                if q not in ours or ours[q].committed < o:
                    ours[q] = QueueProgress(committed=o, next=o)
        text = self._read(INFLIGHT_FILE)
        doc = json.loads(text) if text.strip() else {}
        for k, queues in doc.get("groups", {}).items():
            topic, group = consumer_offsets.split_key(k)
            progress = state.get((group, topic))
            if progress is None:
                continue  # no committed offset: the group was reset or removed
            for q, saved in queues.items():
                p = progress.get(int(q))
                if p is None:
                    continue
                p.next = max(p.committed, int(saved["next"]))
                p.settled = {o for o in saved["settled"] if p.committed <= o < p.next}
                for o, attempt, visible_at, version in saved["inflight"]:
                    if p.committed <= o < p.next and o not in p.settled:
                        p.inflight[o] = Flight(attempt, visible_at, version)
                # anything in [committed, next) neither settled nor in flight: hand it out again
                for o in range(p.committed, p.next):
                    if o not in p.settled and o not in p.inflight:
                        p.inflight[o] = Flight(0, 0, 0, lost_track=True)
        return state, offsets

    def save(
        self, state: dict[Key, dict[int, QueueProgress]], offsets: consumer_offsets.OffsetTable
    ) -> None:
        self.write(self.render(state, offsets))

    def render(
        self, state: dict[Key, dict[int, QueueProgress]], offsets: consumer_offsets.OffsetTable
    ) -> Rendered:
        """The two files' contents for ``state``: taken on the event loop, while nothing
        changes the state, and written by ``write`` (which may run in a thread: the fsyncs
        are the slow part)."""
        inflight: dict[str, dict[str, dict]] = {}
        for (group, topic), queues in state.items():
            offsets.offsets[(topic, group)] = {q: p.committed for q, p in queues.items()}
            inflight[consumer_offsets.key(topic, group)] = {
                str(q): {
                    "next": p.next,
                    "settled": sorted(p.settled),
                    "inflight": [
                        [o, f.attempt, f.visible_at, f.version]
                        for o, f in sorted(p.inflight.items())
                    ],
                }
                for q, p in queues.items()
                if p.next > p.committed
            }
        return Rendered(
            next(self._renders),
            json.dumps({"version": 1, "groups": inflight}, separators=(",", ":")).encode(),
            consumer_offsets.render(offsets).encode(),
        )

    def write(self, rendered: "Rendered") -> None:
        """Writes the files, unless a newer render was written already (one written in a
        thread may finish after a later one written on the loop)."""
        with self._lock:
            if rendered.number < self._written:
                return
            # the in-flight file first: a crash between the two leaves offsets older than the
            # in-flight state, which load() reconciles (never newer, which could skip messages)
            durable.replace_file(self.dir / INFLIGHT_FILE, rendered.inflight)
            durable.replace_file(self.dir / OFFSETS_FILE, rendered.offsets)
            self._written = rendered.number
