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

A batch of plain messages (one topic, one born host; a producer's columns, or Messages with
no flags, properties or delay) is prepared all at once instead, as a ``PlainRun``: their
headers as rows of a numpy record array with the same bytes as the struct (``_DTYPES``), so
the lock fills three columns and joins the rows with the bodies and what follows them, with
no per-record pack. Below ``FEW`` messages numpy's set-up costs more than it saves, and such
a batch is a ``PlainFew``: its records prepared one by one, with the same interface.
"""

import functools
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import numpy as np

from rmqstore.errors import CorruptRecordError
from rmqstore.formats import BytesLike
from rmqstore.formats import commitlog as cl
from rmqstore.formats import properties as props_fmt
from rmqstore.formats.hosts import Host

_SHORT = cl._SHORT  # the properties length
_MAX_PROPERTIES = props_fmt.MAX_PROPERTIES_LENGTH
TOTAL_SIZE = 1  # position of the total size in a prepared tuple
SYS_FLAG = 5  # position of the stored sys flag (v6 bits set)
FEW = 8  # a plain batch of fewer messages is prepared one by one (see PlainFew)

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
        body: BytesLike,
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
        bodies: BytesLike | list[bytes],
        body_sizes: Sequence[int],
        properties: Sequence[bytes | Sequence[bytes]],
        born_timestamp: int | Sequence[int],
        born_host: Host,
        few: int = FEW,
    ) -> "Plain":
        """``prepare`` for many plain messages of one topic, born at one host (flag, sys flag,
        reconsume times and prepared tx offset 0), at once: message i's body is ``bodies[i]``
        if bodies is a list, else the next ``body_sizes[i]`` bytes of ``bodies``; its born
        timestamp is ``born_timestamp`` or its entry; its properties the concatenation of
        ``properties``' parts, each one bytes for every message or a sequence of one each.
        Fewer than ``few`` messages come as a ``PlainFew``, more as a ``PlainRun``."""
        n = len(body_sizes)
        if n < few:
            return self._prepare_few(
                topic, queue_ids, bodies, body_sizes, properties, born_timestamp, born_host
            )
        head = self._topic_heads.get(topic) or self._topic_head(topic)
        if len(born_host.ip) == 4:
            fixed, sys_flag = self._fixed_v4_born, self._store_bit
        else:
            fixed, sys_flag = self._fixed_v6_born, cl.BORNHOST_V6_FLAG | self._store_bit
        body_views: Sequence[BytesLike]
        if isinstance(bodies, list):
            body_views = bodies
        else:
            view = memoryview(bodies)
            ends = list(accumulate(body_sizes))
            body_views = [view[e - size : e] for e, size in zip(ends, body_sizes, strict=True)]
        each_born = not isinstance(born_timestamp, int)
        parts = list(properties)
        lead = parts.pop(0) if parts and isinstance(parts[0], bytes) else b""
        assert isinstance(lead, bytes)
        columns = [[part] * n if isinstance(part, bytes) else part for part in parts]
        varying = [part for part in parts if not isinstance(part, bytes)]
        shared = len(lead) + sum(len(part) for part in parts if isinstance(part, bytes))
        props_len: Any = shared  # an int (every record's) or one length per record
        for part in varying:
            props_len = props_len + np.fromiter(map(len, part), np.int64, n)
        if shared + sum(max(map(len, part), default=0) for part in varying) > _MAX_PROPERTIES:
            longest = int(np.max(props_len))
            if longest > _MAX_PROPERTIES:
                raise CorruptRecordError(f"properties are {longest} bytes, at most 32767")
        # what follows a body: [topic length][topic][properties length] and ``lead``
        after_row = head + _SHORT.pack(0) + lead
        after = np.frombuffer(bytearray(after_row * n), _after_dtype(len(head), len(after_row)))
        after["properties_length"] = props_len
        # each header from one packed with the batch's fields, then what differs by record
        header = np.frombuffer(
            bytearray(
                fixed.pack(
                    0, cl.MAGIC_V1, 0, 0, 0, 0, 0, sys_flag,
                    0 if each_born else born_timestamp, born_host.ip, born_host.port, 0,
                    self._store_ip, self._store_port, 0, 0, 0,
                ) * n  # fmt: skip
            ),
            _DTYPES[fixed],
        )
        body_len = np.asarray(body_sizes, np.int64)
        header["total"] = body_len + props_len + (fixed.size + len(head) + _SHORT.size)
        header["crc"] = np.fromiter(map(cl.crc32, body_views), np.int64, n) & 0x7FFFFFFF
        header["queue_id"] = queue_ids
        header["body_length"] = body_len
        if each_born:
            header["born_timestamp"] = born_timestamp
        rows = after.view(f"V{len(after_row)}").tolist()
        return PlainRun(header, body_views, [rows, *columns], header["total"].tolist(), sys_flag)

    def _prepare_few(
        self, topic: bytes, queue_ids: Sequence[int], bodies: BytesLike | list[bytes],
        body_sizes: Sequence[int], properties: Sequence[bytes | Sequence[bytes]],
        born_timestamp: int | Sequence[int], born_host: Host,
    ) -> "PlainFew":  # fmt: skip
        """``prepare_plain``'s records, each prepared on its own."""
        if isinstance(bodies, list):
            body_list: Sequence[BytesLike] = bodies
        else:
            view, at, body_list = memoryview(bodies), 0, []
            for size in body_sizes:
                body_list.append(view[at : at + size])
                at += size
        records = []
        for i, (queue_id, body) in enumerate(zip(queue_ids, body_list, strict=True)):
            props = b"".join(p if isinstance(p, bytes) else p[i] for p in properties)
            born = born_timestamp if isinstance(born_timestamp, int) else born_timestamp[i]
            records.append(self.prepare(topic, queue_id, body, props, 0, 0, born, born_host))
        return PlainFew(self, records, [r[TOTAL_SIZE] for r in records], records[0][SYS_FLAG])

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
        records: "Sequence[Prepared] | Plain",
        queue_offsets: Sequence[int],
        physical_offsets: Sequence[int],
        store_timestamp: int,
    ) -> bytes:
        """The records, in order, with their offsets and the store time filled in."""
        if isinstance(records, PlainRun):
            return records.encode(queue_offsets, physical_offsets, store_timestamp)
        if isinstance(records, PlainFew):
            records = records.records
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


@dataclass(slots=True)
class PlainRun:
    """``prepare_plain``'s records as columns: a header row per record (every fixed field
    but queue offset, physical offset and store time), the bodies, and the pieces after each
    body (``tails[j][i]`` is record i's piece j; joined they are topic and properties)."""

    header: np.ndarray
    bodies: Sequence[BytesLike]
    tails: list[Sequence[bytes]]
    sizes: list[int]  # total sizes
    sys_flag: int  # every record's

    def __len__(self) -> int:
        return len(self.bodies)

    def __getitem__(self, s: slice) -> "PlainRun":
        tails = [t[s] for t in self.tails]
        return PlainRun(self.header[s], self.bodies[s], tails, self.sizes[s], self.sys_flag)

    def encode(
        self, queue_offsets: Sequence[int], physical_offsets: Sequence[int], store_timestamp: int
    ) -> bytes:
        """The records with these offsets and store time (set in the header rows), back to
        back."""
        header = self.header
        header["queue_offset"] = queue_offsets
        header["physical_offset"] = physical_offsets
        header["store_timestamp"] = store_timestamp
        stride = 2 + len(self.tails)
        pieces: list[BytesLike] = [b""] * (len(self.bodies) * stride)
        pieces[0::stride] = header.view(f"V{header.itemsize}").tolist()
        pieces[1::stride] = self.bodies
        for j, tail in enumerate(self.tails, 2):
            pieces[j::stride] = tail
        return b"".join(pieces)


@dataclass(slots=True)
class PlainFew:
    """A few plain records, prepared one by one: what a ``PlainRun`` offers, for batches
    too small for numpy to pay off."""

    encoder: BatchEncoder
    records: list[Prepared]
    sizes: list[int]  # total sizes
    sys_flag: int  # every record's

    @classmethod
    def of(cls, encoder: BatchEncoder, record: Prepared) -> "PlainFew":
        """One prepared record."""
        return cls(encoder, [record], [record[TOTAL_SIZE]], record[SYS_FLAG])

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, s: slice) -> "PlainFew":
        return PlainFew(self.encoder, self.records[s], self.sizes[s], self.sys_flag)

    def encode(
        self, queue_offsets: Sequence[int], physical_offsets: Sequence[int], store_timestamp: int
    ) -> bytes:
        return self.encoder.encode(self.records, queue_offsets, physical_offsets, store_timestamp)


Plain = PlainRun | PlainFew  # plain messages of one topic and host, prepared at once


def _numpy_twin(fixed: struct.Struct) -> np.dtype:
    """The fixed part of a record as a numpy record (the same bytes as ``fixed``)."""
    codes = re.findall(r"(\d*)([iqs])", fixed.format[1:])
    assert len(codes) == len(_FIELDS), fixed.format
    kinds = {"i": ">i4", "q": ">i8", "s": "V"}
    dtype = np.dtype([(f, kinds[c] + n) for f, (n, c) in zip(_FIELDS, codes, strict=True)])
    assert dtype.itemsize == fixed.size
    return dtype


# the fixed fields in record order (the values ``encode`` packs)
_FIELDS = (
    "total", "magic", "crc", "queue_id", "flag", "queue_offset", "physical_offset", "sys_flag",
    "born_timestamp", "born_ip", "born_port", "store_timestamp", "store_ip", "store_port",
    "reconsume_times", "prepared_tx_offset", "body_length",
)  # fmt: skip
_DTYPES = {fixed: _numpy_twin(fixed) for fixed in cl._FIXED.values()}


@functools.lru_cache(maxsize=1024)
def _after_dtype(head_size: int, size: int) -> np.dtype:
    """``[topic length][topic][properties length]...`` with the properties length as a field."""
    return np.dtype({"names": ["properties_length"], "formats": [">i2"], "offsets": [head_size],
                     "itemsize": size})  # fmt: skip


@functools.lru_cache(maxsize=64)
def encoder_for(store_host: Host) -> BatchEncoder:
    """A shared encoder per store host (encoders keep small caches)."""
    return BatchEncoder(store_host)
