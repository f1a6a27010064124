"""Many v1 commitlog records at once, split around the writer's append lock.

``prepare`` runs before the lock: it checks a record and computes everything except the
three fields only the lock can assign (queue offset, physical offset, store timestamp).
``encode`` runs inside it: it packs each header with those and joins the whole batch into the
bytes copied into the segment. Both only feed the structs of ``commitlog.py``, where the
record layout is described; the bytes equal ``commitlog.encode_parts`` given the same fields.

A prepared record is a plain tuple (cheap to make, cheap to unpack):

    (header struct, total size, body CRC, queue id, flag, sys flag, born timestamp,
     born ip, born port, reconsume times, prepared tx offset, body, tail)

where ``tail`` is ``[topic length][topic][properties length][properties]``.
"""

import functools
from collections.abc import Sequence
from typing import Any

from rmqstore.errors import CorruptRecordError
from rmqstore.formats import commitlog as cl
from rmqstore.formats import properties as props_fmt
from rmqstore.formats.hosts import Host

_SHORT = cl._SHORT  # the properties length
TOTAL_SIZE = 1  # position of the total size in a prepared tuple
SYS_FLAG = 5  # position of the stored sys flag (v6 bits set)

Prepared = tuple[Any, ...]


class BatchEncoder:
    """Encodes records stored by one host (its address is in every record)."""

    def __init__(self, store_host: Host) -> None:
        self._store_ip, self._store_port = store_host.ip, store_host.port
        self._store_v6 = len(store_host.ip) == 16
        self._store_bit = cl.STOREHOST_V6_FLAG if self._store_v6 else 0
        self._topic_heads: dict[bytes, bytes] = {}
        self._fixed_v4_born = cl._FIXED[(False, self._store_v6)]
        self._fixed_v6_born = cl._FIXED[(True, self._store_v6)]

    def prepare(
        self,
        topic: bytes,
        queue_id: int,
        body: bytes,
        properties: bytes,
        flag: int,
        sys_flag: int,
        born_timestamp: int,
        born_host: Host,
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
    ) -> Prepared:
        """Everything of one record but its offsets and store time (raises on bad sizes)."""
        head = self._topic_heads.get(topic) or self._topic_head(topic)
        props_len = len(properties)
        if props_len > props_fmt.MAX_PROPERTIES_LENGTH:
            raise CorruptRecordError(f"properties are {props_len} bytes, at most 32767")
        if len(born_host.ip) == 4:
            fixed, born_bit = self._fixed_v4_born, 0
        else:
            fixed, born_bit = self._fixed_v6_born, cl.BORNHOST_V6_FLAG
        return (
            fixed,
            fixed.size + len(body) + len(head) + 2 + props_len,
            cl.crc32(body) & 0x7FFFFFFF,  # cl.body_crc, inlined: this runs per message
            queue_id,
            flag,
            (sys_flag & ~cl.V6_BITS) | born_bit | self._store_bit,
            born_timestamp,
            born_host.ip,
            born_host.port,
            reconsume_times,
            prepared_transaction_offset,
            body,
            head + _SHORT.pack(props_len) + properties,
        )

    def prepare_plain(
        self,
        topic: bytes,
        queue_ids: Sequence[int],
        bodies: Sequence[bytes | memoryview],
        properties: Sequence[bytes],
        born_timestamp: int,
        born_host: Host,
    ) -> list[Prepared]:
        """``prepare`` for many plain messages of one topic, born at one host and time (flag,
        sys flag, reconsume times and prepared tx offset 0): one per body."""
        head = self._topic_heads.get(topic) or self._topic_head(topic)
        if properties and max(map(len, properties)) > props_fmt.MAX_PROPERTIES_LENGTH:
            longest = max(map(len, properties))
            raise CorruptRecordError(f"properties are {longest} bytes, at most 32767")
        if len(born_host.ip) == 4:
            fixed, sys_flag = self._fixed_v4_born, self._store_bit
        else:
            fixed, sys_flag = self._fixed_v6_born, cl.BORNHOST_V6_FLAG | self._store_bit
        base, ip, port = fixed.size + len(head) + 2, born_host.ip, born_host.port
        crc32, short = cl.crc32, _SHORT.pack
        return [
            (
                fixed,
                base + len(body) + len(props),
                crc32(body) & 0x7FFFFFFF,
                qid,
                0,
                sys_flag,
                born_timestamp,
                ip,
                port,
                0,
                0,
                body,
                head + short(len(props)) + props,
            )
            for qid, body, props in zip(queue_ids, bodies, properties, strict=True)
        ]

    def _topic_head(self, topic: bytes) -> bytes:
        """``[topic length][topic]``, checked and cached."""
        if len(topic) > cl.MAX_TOPIC_BYTES:
            raise CorruptRecordError(
                f"topic is {len(topic)} bytes, v1 records hold at most {cl.MAX_TOPIC_BYTES}"
            )
        head = bytes((len(topic),)) + topic
        if len(self._topic_heads) < 100_000:
            self._topic_heads[topic] = head
        return head

    def encode(
        self,
        records: Sequence[Prepared],
        queue_offsets: Sequence[int],
        physical_offsets: Sequence[int],
        store_timestamp: int,
    ) -> bytes:
        """The records, in order, with their offsets and the store time filled in."""
        sip, sport, magic = self._store_ip, self._store_port, cl.MAGIC_V1
        out: list[bytes] = []
        extend = out.extend
        for rec, qo, phy in zip(records, queue_offsets, physical_offsets, strict=True):
            fixed, total, crc, qid, flag, sf, bts, bip, bport, rc, ptx, body, tail = rec
            header = fixed.pack(
                total, magic, crc, qid, flag, qo, phy, sf, bts, bip, bport,
                store_timestamp, sip, sport, rc, ptx, len(body),
            )  # fmt: skip
            extend((header, body, tail))
        return b"".join(out)


@functools.lru_cache(maxsize=64)
def encoder_for(store_host: Host) -> BatchEncoder:
    """A shared encoder per store host (encoders keep small caches)."""
    return BatchEncoder(store_host)
