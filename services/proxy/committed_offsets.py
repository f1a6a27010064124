"""Committed offsets set from outside the pop path: ``reset`` (``rmqstore group reset``, the
console, mqadmin's resetOffsetByTime) and the commits of RocketMQ 4.x consumers through the
remoting broker (``committed``, ``commit``): one table of progress for both protocols, kept
by ``Consumption``."""

from services.proxy.progress import QueueProgress
from services.proxy.queue_bounds import QueueBounds


class CommittedOffsets(QueueBounds):
    def _number_restored(self) -> None:
        raise NotImplementedError  # Consumption's

    def flush(self) -> None:
        raise NotImplementedError  # Consumption's

    def reset(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Start the group again at these offsets (queue -> offset): in-flight messages of
        those queues are forgotten (their receipt handles become stale)."""
        for q, o in offsets.items():
            self.queue(group, topic, q).reset(o)
        self._expiry.pop((group, topic), None)
        self._number_restored()
        self.dirty = True
        self.flush()

    def committed(self, group: str, topic: str, q: int) -> int | None:
        """The queue's committed offset, None when the group has none there (nothing is
        created by asking)."""
        p = self.state.get((group, topic), {}).get(q)
        return None if p is None else p.committed

    def commit(self, group: str, topic: str, q: int, offset: int) -> bool:
        """A 4.x consumer's commit: the queue's committed offset becomes ``offset`` (one
        table for both protocols, as RocketMQ's), unless the group pops that queue (messages
        in flight or settled above the committed offset: the acks own it then). Whether it
        was applied. Written with the next flush, as every change of progress."""
        p = self.state.get((group, topic), {}).get(q)
        if p is not None and (p.inflight or p.next > p.committed):
            return False
        self.group(group)
        queues = self.state.setdefault((group, topic), {})
        if p is None:
            p = queues[q] = QueueProgress(committed=offset, next=offset)
        elif p.committed != offset:
            p.reset(offset)
        else:
            return True
        self.dirty = True
        return True
