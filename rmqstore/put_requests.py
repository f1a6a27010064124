"""The writer requests of an ``Appender``'s batch: its messages (``Plain`` or ``Message``)
as ``PutBatchRequest``s, each built in place (a ``Message`` or ``MessageColumns`` passed to a
constructor would be copied into it)."""

from typing import Any, NamedTuple, TypeVar

from rmqstore.formats import properties as P
from rmqstore.v1 import commitlog_pb2, common_pb2


class Plain(NamedTuple):
    """A message with none of what only a ``Message`` carries (properties but __BORNHOST,
    delay, flags): the writer stores it as the ``Message`` of ``as_message`` would be
    stored."""

    topic: str
    queue_id: int
    body: bytes
    tags: str
    keys: str
    unique_key: str
    born_host: str
    born_timestamp: int = 0  # ms; 0: when the writer takes it
    born_host_property: str = ""  # __BORNHOST (none when empty)

    def as_message(self) -> common_pb2.Message:
        return common_pb2.Message(
            topic=self.topic, queue_id=self.queue_id, body=self.body, tags=self.tags,
            keys=self.keys, unique_key=self.unique_key, born_host=self.born_host,
            born_timestamp=self.born_timestamp,
            properties=[common_pb2.Property(name=P.BORN_HOST, value=self.born_host_property)]
            if self.born_host_property else (),
        )  # fmt: skip


Record = common_pb2.Message | Plain
G = TypeVar("G", bound=tuple[list[Record], Any, int])  # a put: its records, its waiter, bytes


ColumnsKey = tuple[str, str, str]  # what a MessageColumns holds once for all its messages


def _columns_key(records: list[Record]) -> ColumnsKey | None:
    """(topic, born host, __BORNHOST) when every record is ``Plain`` with those."""
    first = records[0]
    if not isinstance(first, Plain):
        return None
    key = (first.topic, first.born_host, first.born_host_property)
    for r in records:
        if not isinstance(r, Plain) or (r.topic, r.born_host, r.born_host_property) != key:
            return None
    return key


def requests_of(groups: list[G], merge_below: int = 0
                ) -> list[tuple[commitlog_pb2.PutBatchRequest, list[G]]]:  # fmt: skip
    """The writer requests of one batch, each with the groups it holds. A batch of fewer
    than ``merge_below`` messages that would take several requests (senders of other hosts
    or topics: synchronous senders' group commit) is one request of ``Message``s: the
    writer's cost is mostly per request."""
    if len(groups) == 1 and len(groups[0][0]) == 1 and isinstance(groups[0][0][0], Plain):
        return [(_lone(groups[0][0][0]), groups)]  # a synchronous sender's: the common case
    by_key: dict[ColumnsKey | None, list[G]] = {}
    for g in groups:
        by_key.setdefault(_columns_key(g[0]), []).append(g)
    if len(by_key) > 1 and sum(len(g[0]) for g in groups) < merge_below:
        by_key = {None: groups}
    out = []
    for key, gs in by_key.items():
        records = [r for rs, _f, _n in gs for r in rs]
        if key is None:
            request = commitlog_pb2.PutBatchRequest(columnar_results=True, offsets_only=True)
            add = request.messages.add  # built in place: a Message passed in is copied
            for r in records:
                if not isinstance(r, Plain):
                    request.messages.append(r)
                elif r.born_host_property:
                    request.messages.append(r.as_message())
                else:
                    add(topic=r.topic, queue_id=r.queue_id, body=r.body, tags=r.tags,
                        keys=r.keys, unique_key=r.unique_key, born_host=r.born_host,
                        born_timestamp=r.born_timestamp)  # fmt: skip
            out.append((request, gs))
            continue
        plain: list[Any] = records
        _topic, queue_ids, bodies, tags, keys, uniqs, _born, born_ts, _prop = zip(
            *plain, strict=True)  # fmt: skip
        columns = {  # a dict, not a MessageColumns: built in place, not copied
            "topic": key[0], "body_size": [len(b) for b in bodies], "bodies": b"".join(bodies),
            "queue_id": queue_ids, "unique_key": uniqs, "born_host": key[1],
            "tags": tags[:1] if tags.count(tags[0]) == len(tags) else tags,
            "keys": keys[:1] if keys.count(keys[0]) == len(keys) else keys,
            "born_timestamps": born_ts if any(born_ts) else (), "born_host_property": key[2],
        }  # fmt: skip
        out.append((commitlog_pb2.PutBatchRequest(
            columns=columns, columnar_results=True, offsets_only=True), gs))  # fmt: skip
    return out


def _lone(r: Plain) -> commitlog_pb2.PutBatchRequest:
    """The request of one ``Plain`` message (what ``requests_of`` makes of it, made directly)."""
    return commitlog_pb2.PutBatchRequest(
        columns={  # a dict, not a MessageColumns: built in place, not copied
            "topic": r.topic, "body_size": (len(r.body),), "bodies": r.body,
            "queue_id": (r.queue_id,), "unique_key": (r.unique_key,), "born_host": r.born_host,
            "tags": (r.tags,), "keys": (r.keys,),
            "born_timestamps": (r.born_timestamp,) if r.born_timestamp else (),
            "born_host_property": r.born_host_property,
        },
        columnar_results=True, offsets_only=True,
    )  # fmt: skip
