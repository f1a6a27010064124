"""Where a consumer group stands against its queue's bounds. Retention deletes commitlog
segments under a group that has not consumed them (the group moves up to the first message
still stored, as RocketMQ moves a consumer below the queue's minimum offset); recovery can
cut the commitlog, and the queues with it, below a group's committed offset (the group goes
back to the queue's end, as RocketMQ corrects an offset past the maximum). Both are counted
per queue and in the metrics, and logged."""

import logging

from rmqstore.queue_files import QueueFiles
from services.proxy.progress import Key, QueueProgress
from services.proxy.record_reads import RecordReads
from services.proxy.redelivery import Entry, Redelivery

log = logging.getLogger("services.proxy.consume")
GONE = -2  # a flight's commitlog offset when its consume-queue unit is no longer stored


class QueueBounds(Redelivery):
    """``Consumption``'s bounds checks (``skip_gone``, ``correct_end``) and the per-queue
    counts of what they skipped."""

    queues: QueueFiles
    reads: RecordReads
    skipped: dict[tuple[str, str, int], int]
    _skips: int  # times anything was skipped (a receive that skipped looks again)
    _corrected: set[tuple[str, str, int]]  # beyond the queue's end, logged once

    def low_offset(self, topic: str, q: int) -> int:
        """The queue's first offset whose message is still stored: retention deletes
        commitlog segments while a consume-queue file only partly below them stays."""
        return self.queues.first_present(topic, q, self.reads.files.min_offset(fresh=True))

    def skip_gone(self, key: Key, q: int, p: QueueProgress) -> int:
        """Move the group up to the queue's first message still stored, as RocketMQ moves a
        consumer below the queue's minimum offset: the offsets below it (in flight or never
        handed out) are skipped, counted per queue and in the metrics. How many."""
        group, topic = key
        low = self.low_offset(topic, q)
        if low <= p.committed:
            return 0
        gone = [o for o in p.inflight if o < low]
        n = len(gone) + max(0, low - p.next)
        for o in gone:
            del p.inflight[o]
        p.settled = {o for o in p.settled if o >= low}
        p.next = max(p.next, low)
        p.committed = low
        while p.committed in p.settled:
            p.settled.discard(p.committed)
            p.committed += 1
        self.dirty = True
        if n:
            k = (group, topic, q)
            self.skipped[k] = self.skipped.get(k, 0) + n
            self._skips += 1
            self.on_event(group, self._shown_as.get((group, topic), topic), "skipped", n)
            log.warning("%s@%s queue %d: %d messages below offset %d are no longer stored "
                        "(retention); skipped", topic, group, q, n, low)  # fmt: skip
        return n

    def correct_end(self, key: Key, q: int, p: QueueProgress) -> bool:
        """A group beyond the queue's end (the commitlog was cut after a crash, and the
        queue with it) goes back to the end, as RocketMQ corrects an offset past the max:
        new messages take those offsets again and must be delivered. Logged once per queue,
        counted every time. Whether it was corrected."""
        group, topic = key
        end = self.queues.max_offset(topic, q)
        if p.next <= end or not self.queues.has_files(topic, q):
            return False
        was = p.committed
        p.inflight = {o: f for o, f in p.inflight.items() if o < end}
        p.settled = {o for o in p.settled if o < end}
        p.next = end
        p.committed = min(p.committed, end)
        self.dirty = True
        self.on_event(group, self._shown_as.get((group, topic), topic), "corrected", 1)
        if (group, topic, q) not in self._corrected:
            self._corrected.add((group, topic, q))
            log.warning("%s@%s queue %d: committed offset %d is beyond the queue's end %d "
                        "(the commitlog was cut); corrected to %d", topic, group, q, was, end,
                        p.committed)  # fmt: skip
        return True

    def drop_gone(self, group: str, topic: str, entries: list[Entry], fresh: bool) -> list[Entry]:
        """``entries`` without those whose record is no longer stored (below the commitlog's
        minimum, their unit deleted, or with ``fresh`` beyond the queue's end): their queues
        are moved past them (``skip_gone``, ``correct_end``)."""
        low = self.reads.files.min_offset(fresh)
        queues = {q for q, _o, f in entries if f.phy < low or f.phy == GONE}
        if fresh:
            queues |= {q for q, _o, _f in entries}
        if not queues:
            return entries
        key = (group, topic)
        for q in sorted(queues):
            p = self.queue(group, topic, q)
            if fresh:
                self.correct_end(key, q, p)
            self.skip_gone(key, q, p)
        kept = []
        for q, o, f in entries:
            if not self._current(group, topic, q, o, f):
                continue
            if f.phy == GONE:  # its unit is gone and the queue's bounds do not say why
                self.settle(group, topic, q, o)
                self.skipped[(group, topic, q)] = self.skipped.get((group, topic, q), 0) + 1
                self._skips += 1
                self.on_event(group, self._shown_as.get((group, topic), topic), "skipped", 1)
                continue
            kept.append((q, o, f))
        return kept

    def check_bounds(self) -> None:
        """Every group's queues checked against their bounds (``skip_gone``,
        ``correct_end``), so that ``group describe`` and the lag metrics are right for a
        group no one is receiving for."""
        low = self.reads.files.min_offset(fresh=True)
        for key, queues in list(self.state.items()):
            for q, p in list(queues.items()):
                if p.next and not self.queues.written(key[1], q, p.next - 1):
                    self.correct_end(key, q, p)
                units = self.queues.read(key[1], q, p.committed, 1)
                if (units and units[0].phy_offset < low) or (
                    not units and self.queues.min_offset(key[1], q) > p.committed
                ):
                    self.skip_gone(key, q, p)
