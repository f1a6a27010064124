"""RocketMQ 4.9's master/slave replication ("HA") wire format, both directions, big-endian.

Slave → master, an offset report (the slave's max commit-log offset, the end of the last
byte it holds; the first one is the slave's start point, later ones acknowledge):

┌──────────────────────────┐
│ max offset (int64)       │
└──────────────────────────┘

Master → slave, a transfer frame: ``size`` raw commit-log bytes that begin at commit-log
offset ``offset``; at most ``MAX_FRAME_BODY`` bytes, never across a commit-log file end,
record boundaries ignored. ``size == 0`` is a heartbeat carrying the next offset:

┌──────────────────────────┬──────────────┬────────────────────────────┐
│ offset (int64)           │ size (int32) │ size bytes of the commit log│
└──────────────────────────┴──────────────┴────────────────────────────┘

Plain TCP: no handshake, no version, no authentication. Pure functions over buffers; the
sockets belong to the writer.
"""

import struct
from typing import NamedTuple

from rmqstore.formats import BytesLike

REPORT = struct.Struct(">q")  # the slave's max commit-log offset
REPORT_SIZE = REPORT.size  # 8
FRAME_HEADER = struct.Struct(">qi")  # offset, body size
FRAME_HEADER_SIZE = FRAME_HEADER.size  # 12
MAX_FRAME_BODY = 32 * 1024  # RocketMQ's haTransferBatchSize

HEARTBEAT_INTERVAL_S = 5.0  # either side, after this long without sending anything
IDLE_TIMEOUT_S = 20.0  # a peer from which nothing was read for this long is dropped
SLAVE_RETRY_S = 5.0  # a slave reconnects after this long


class FrameHeader(NamedTuple):
    offset: int
    size: int

    @property
    def is_heartbeat(self) -> bool:
        return self.size == 0

    @property
    def end(self) -> int:
        return self.offset + self.size


def encode_report(max_offset: int) -> bytes:
    if max_offset < 0:
        raise ValueError(f"an HA report cannot carry a negative offset ({max_offset})")
    return REPORT.pack(max_offset)


def last_report(buf: BytesLike) -> tuple[int | None, int]:
    """The last complete report in ``buf`` and how many bytes were consumed.

    As RocketMQ's master does: only whole 8-byte values count, and of several only the last
    one; a partial value stays in the buffer (``consumed`` excludes it)."""
    whole = len(buf) - len(buf) % REPORT_SIZE
    if whole == 0:
        return None, 0
    return REPORT.unpack_from(buf, whole - REPORT_SIZE)[0], whole


def encode_frame_header(offset: int, size: int) -> bytes:
    if not 0 <= size <= MAX_FRAME_BODY:
        raise ValueError(f"an HA frame carries 0..{MAX_FRAME_BODY} bytes, not {size}")
    if offset < 0:
        raise ValueError(f"an HA frame cannot start at a negative offset ({offset})")
    return FRAME_HEADER.pack(offset, size)


def decode_frame_header(buf: BytesLike, pos: int = 0) -> FrameHeader:
    """The header at ``pos``; the caller has at least ``FRAME_HEADER_SIZE`` bytes there.

    A size outside ``0..MAX_FRAME_BODY`` or a negative offset is a ``ValueError``: the peer
    does not speak this protocol (RocketMQ's slave would read garbage; ours drops it)."""
    offset, size = FRAME_HEADER.unpack_from(buf, pos)
    if offset < 0 or not 0 <= size <= MAX_FRAME_BODY:
        raise ValueError(f"not an HA frame header: offset {offset}, size {size}")
    return FrameHeader(offset, size)


def frame_span(offset: int, end: int, file_size: int) -> int:
    """How many bytes the frame that starts at ``offset`` carries when the master holds bytes
    up to ``end``: at most ``MAX_FRAME_BODY``, never past the end of ``offset``'s file."""
    file_end = offset - offset % file_size + file_size
    return max(0, min(end, file_end, offset + MAX_FRAME_BODY) - offset)


def start_offset(first_report: int, master_max: int, file_size: int) -> int:
    """Where a master starts sending: an empty slave (report 0) gets the first byte of the
    master's last file; any other slave exactly its report."""
    if first_report == 0:
        return master_max - master_max % file_size
    return first_report
