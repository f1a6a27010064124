"""Delayed delivery: schedule-topic messages put again into their real queue when due.

One thread in the writer's process, as RocketMQ's schedule service. For each delay level it
reads its schedule queue (``SCHEDULE_TOPIC_XXXX`` / level - 1) from the level's offset; a unit
is due when its tags code (store time + the level's delay) has passed. A step takes up to
``STEP`` due units of all levels and:

1. records the step's range of each level in ``rmqstore/delivery.progress``;
2. appends the due records again, all at once, in delivery-time order over all levels
   (``reput``): to their real queue, or parked once more on the schedule topic when they
   carry a delivery time (``TIMER_DELIVER_MS``) not reached yet and a level short enough
   exists;
3. writes the levels' new offsets to ``config/delayOffset.json`` (RocketMQ's format).

A kill between 1 and 3 delivers that step again on restart: at most one step (``STEP``
messages) is duplicated, and those are counted (``possible_duplicates``). A due unit whose
delivery time is nearer than the shortest level waits at the head of its level until then.
"""

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rmqstore import delay
from rmqstore.durable import replace_file
from rmqstore.errors import CorruptRecordError, MessageIllegalError, StoreError
from rmqstore.formats import commitlog
from rmqstore.formats import delay_offset as offsets_fmt
from rmqstore.layout import SCHEDULE_TOPIC
from rmqstore.schedule_queue import PRE_BLANK_SIZE, ScheduleQueue
from services.commitlog import reput
from services.commitlog.engine import CommitLogEngine

log = logging.getLogger(__name__)
STEP = 512  # due units appended (and persisted) at once
POLL_S = 0.1  # look for new units at least this often (RocketMQ: 100 ms)
ERROR_BACKOFF_S = 1.0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class LevelState:
    level: int
    queue: ScheduleQueue
    offset: int = 0  # next unit to deliver (persisted in delayOffset.json)
    next_due: int = 0  # delivery time of the unit at offset (0: none waiting)
    delivered: int = 0
    parked: int = 0


@dataclass
class DeliveryStats:
    delivered: int = 0  # appended to their real queue
    parked: int = 0  # parked again (delivery time not reached)
    skipped: int = 0  # unusable (no REAL_TOPIC, record gone below the minimum offset, ...)
    possible_duplicates: int = 0  # delivered again after an unclean stop (last step)
    steps: int = 0
    persists: int = 0


class DeliveryService:
    def __init__(self, engine: CommitLogEngine) -> None:
        self.engine = engine
        self.layout = engine.layout
        self.stats = DeliveryStats()
        self.levels = {
            lv: LevelState(lv, ScheduleQueue(self.layout.schedule_queue_dir(lv)))
            for lv in range(1, delay.MAX_LEVEL + 1)
        }
        self.observers: list = []  # called with (lateness ms list) after each step
        self._lock = threading.Lock()  # one step at a time (thread, or a test's run_once)
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="delivery", daemon=True)
        self._load()

    # -- progress ------------------------------------------------------------------------
    @property
    def _inflight_path(self):
        return self.layout.progress("delivery")

    def _load(self) -> None:
        table = self._read_table()
        for lv, st in self.levels.items():
            # clamped into the queue, as RocketMQ does; its end is the writer's own counter
            # (the builder may not have written the queue that far yet)
            low = st.queue.min_offset()
            high = self.engine.queue_table.get((SCHEDULE_TOPIC, lv - 1), 0)
            st.offset = min(max(table.get(lv, 0), low), max(high, low))
        for lv, (start, stop) in self._read_inflight().items():
            last = self.levels.get(lv)
            again = stop - max(last.offset, start) if last is not None else 0
            if again > 0:
                self.stats.possible_duplicates += again
                log.warning(
                    "level %d: %d messages of the last step before an unclean stop may be "
                    "delivered twice", lv, again,
                )  # fmt: skip

    def _read_table(self) -> dict[int, int]:
        """The file's offsets (or its ``.bak``, as RocketMQ falls back); none if neither
        exists. An unreadable file stops the start: starting from 0 would deliver every
        message still in the schedule queues again."""
        path = self.layout.delay_offset
        errors = []
        for p in (path, path.with_name(path.name + ".bak")):
            try:
                return offsets_fmt.decode(p.read_text(encoding="utf-8"))
            except FileNotFoundError:
                continue
            except (CorruptRecordError, UnicodeDecodeError, OSError) as e:
                errors.append(f"{p}: {e}")
        if errors:
            raise StoreError(
                "cannot read the delivery progress (" + "; ".join(errors) + "): repair the "
                "file, or remove it to deliver every message still in the schedule topic again"
            )
        return {}

    def _read_inflight(self) -> dict[int, tuple[int, int]]:
        """The ranges of the last step, per level, unless the last stop was clean."""
        try:
            data = json.loads(self._inflight_path.read_text())
            return {int(lv): (int(r[0]), int(r[1])) for lv, r in data.items()}
        except (FileNotFoundError, ValueError, TypeError, AttributeError, IndexError):
            return {}

    def offsets(self) -> dict[int, int]:
        return {lv: st.offset for lv, st in self.levels.items()}

    def persist(self) -> None:
        self._replace(self.layout.delay_offset, offsets_fmt.encode(self.offsets()).encode())
        self.stats.persists += 1

    def _replace(self, path: Path, data: bytes) -> None:
        """Atomically; durably too under sync flush (a kill -9 keeps the page cache either
        way, as it keeps the commitlog's unflushed records under async flush)."""
        if self.engine.config.flush == "sync":
            replace_file(path, data)
            return
        tmp = path.with_name(path.name + ".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)

    # -- delivering ----------------------------------------------------------------------
    def run_once(self, now_ms: int | None = None) -> int:
        """Deliver everything due; returns the earliest delivery time still waiting (0: none
        known)."""
        while not self._stop:
            with self._lock:  # per step: a status call waits one step at most
                if not self._step(now_ms or _now_ms()):
                    break
        dues = [st.next_due for st in self.levels.values() if st.next_due]
        return min(dues) if dues else 0

    def _due_units(self, st: LevelState, now: int) -> list[tuple[int, int, int, int]]:
        """The level's due units from its offset: (delivery time, level, commitlog offset,
        size), in queue order; sets ``next_due`` to the first unit not due yet."""
        st.next_due = 0
        level_ms = delay.delay_ms(st.level)
        out = []
        for phy, size, code in st.queue.read(st.offset, STEP):
            at = now if code > now + level_ms else code  # the clock went back: due now
            if size == PRE_BLANK_SIZE and phy == 0:
                at = 0
            if at > now:
                st.next_due = at
                break
            out.append((at, st.level, phy, size))
        return out

    def _step(self, now: int) -> int:
        """Deliver up to STEP due units of all levels, in delivery-time order, as one append;
        returns how many units it moved past.

        A level's progress is one offset, so what a step moves past must be a prefix of its
        queue, even when delivery times do not grow along it (store times that stepped
        back): the STEP earliest units decide how many units of each level are taken, and
        those taken are the level's first ones; a unit that must wait at the head holds the
        units behind it in its queue."""
        levels = {lv: self._due_units(st, now) for lv, st in self.levels.items()}
        earliest = sorted(u for units in levels.values() for u in units)[:STEP]
        counts: dict[int, int] = {}
        for _at, lv, _phy, _size in earliest:
            counts[lv] = counts.get(lv, 0) + 1
        chosen = {lv: levels[lv][:n] for lv, n in counts.items()}  # queue order
        if not chosen:
            return 0
        records = self._records([
            (phy, size) for units in chosen.values() for _at, _lv, phy, size in units
            if size != PRE_BLANK_SIZE
        ])  # fmt: skip
        taken: dict[int, int] = {}  # level -> units moved past (a prefix of its queue)
        moves: list[tuple[int, int, int, commitlog.Record, tuple]] = []
        for lv, units in chosen.items():
            for at, _lv, phy, _size in units:
                rec = records.get(phy)
                entry: tuple | None | Literal[False] = False
                if rec is not None:
                    entry = self._reput(rec, now)
                if entry is None:  # its delivery time is nearer than any level: wait at the head
                    assert rec is not None
                    self.levels[lv].next_due = int(rec.property_map[delay.TIMER_DELIVER_MS])
                    break
                if rec is None:  # gone (retention), not a record, or a pre-blank unit
                    self.stats.skipped += phy != 0
                elif entry is not False:
                    moves.append((at, lv, phy, rec, entry))
                taken[lv] = taken.get(lv, 0) + 1
        if not taken:
            return 0
        moves.sort(key=lambda m: m[:3])  # delivery-time order over all levels
        columns, lateness = [], []
        parked: dict[int, int] = {}  # level -> units parked again
        delivered: dict[int, int] = {}
        for at, lv, _phy, rec, entry in moves:
            columns.append(entry)
            if entry[2] == SCHEDULE_TOPIC:
                parked[lv] = parked.get(lv, 0) + 1
            else:
                lateness.append(now - self._due_time(rec, at))
                delivered[lv] = delivered.get(lv, 0) + 1
        ranges = {lv: (self.levels[lv].offset, self.levels[lv].offset + n)
                  for lv, n in taken.items()}  # fmt: skip
        self._write_inflight(ranges)
        if columns:
            _stored, end = self.engine.append_columns(tuple(zip(*columns, strict=True)))
            self.engine.wait_durable(end)
        for lv, (_start, stop) in ranges.items():
            self.levels[lv].offset = stop
        self.persist()
        for lv, n in parked.items():
            self.levels[lv].parked += n
        self.stats.parked += sum(parked.values())
        self.stats.delivered += len(lateness)
        for lv, n in delivered.items():
            self.levels[lv].delivered += n
        self.stats.steps += 1
        for observe in self.observers:
            observe(lateness)
        return sum(taken.values())

    @staticmethod
    def _due_time(rec: commitlog.Record, at: int) -> int:
        target = rec.property_map.get(delay.TIMER_DELIVER_MS, "")
        return max(at, int(target)) if target.isdigit() else at

    def _records(self, units: list[tuple[int, int]]) -> dict[int, commitlog.Record]:
        """The records of (commitlog offset, size) units that can still be read, decoded and
        checked (a unit whose record is gone or garbled is left out, and logged)."""
        out: dict[int, commitlog.Record] = {}
        for phy, size in units:
            try:
                rec = commitlog.decode(self.engine.read_sized(phy, size), check_crc=False)
            except StoreError as e:  # OffsetOutOfRange (retention), CorruptRecord
                log.warning("schedule record at %d unusable: %s", phy, e)
                continue
            if rec.physical_offset != phy:
                log.warning("schedule unit points at %d, which holds no record of its own", phy)
                continue
            out[phy] = rec
        return out

    def _reput(self, rec: commitlog.Record, now: int) -> tuple | None | Literal[False]:
        """The columns entry for a due record; None: wait (delivery time nearer than any
        level); False: skip it (counted)."""
        target = rec.property_map.get(delay.TIMER_DELIVER_MS, "")
        builder = self.engine.builder
        try:
            if target.isdigit() and int(target) > now:
                level = delay.level_for(int(target) - now)
                return reput.parked(builder, rec, level) if level else None
            topic, queue_id = reput.real_destination(rec)
            return reput.delivered(builder, rec, topic, queue_id)
        except (MessageIllegalError, CorruptRecordError) as e:
            log.warning("schedule record at %d not delivered: %s", rec.physical_offset, e)
            self.stats.skipped += 1
            return False

    def _write_inflight(self, ranges: dict[int, tuple[int, int]]) -> None:
        data = json.dumps({str(lv): list(r) for lv, r in ranges.items()}).encode()
        self._replace(self._inflight_path, data)

    # -- thread --------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                earliest = self.run_once()
            except (StoreError, OSError) as e:
                log.error("delivery step failed: %s; retrying in %.0f s", e, ERROR_BACKOFF_S)
                self._wake.wait(ERROR_BACKOFF_S)
                continue
            wait = POLL_S
            if earliest:
                wait = min(wait, max(earliest - _now_ms(), 0) / 1000)
            self._wake.wait(wait)
            self._wake.clear()

    def wake(self) -> None:
        self._wake.set()

    def close(self) -> None:
        """Stop the thread, persist the offsets and forget the in-flight step (clean stop)."""
        self._stop = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        with self._lock:
            try:
                self.persist()
                self._inflight_path.unlink(missing_ok=True)
            except OSError as e:
                log.warning("could not persist delay offsets at shutdown: %s", e)
            for st in self.levels.values():
                st.queue.close()

    # -- status --------------------------------------------------------------------------
    def status(self, now_ms: int | None = None) -> dict:
        """Pending messages and the next delivery time per level, the delivery lag."""
        now = now_ms or _now_ms()
        levels = []
        lag = 0
        with self._lock:
            for lv, st in self.levels.items():
                pending = max(st.queue.end(st.offset) - st.offset, 0)
                head = st.queue.read(st.offset, 1)
                next_due = head[0][2] if head else 0
                if next_due and next_due <= now:
                    lag = max(lag, now - next_due)
                if pending or st.delivered or st.parked:
                    levels.append({
                        "level": lv, "delay_ms": delay.delay_ms(lv), "pending": pending,
                        "offset": st.offset, "next_delivery_ms": next_due,
                        "delivered": st.delivered, "parked": st.parked,
                    })  # fmt: skip
        s = self.stats
        return {
            "enabled": True, "levels": levels, "lag_ms": lag, "delivered": s.delivered,
            "parked": s.parked, "skipped": s.skipped,
            "possible_duplicates": s.possible_duplicates,
        }  # fmt: skip
