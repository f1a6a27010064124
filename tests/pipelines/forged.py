"""A commitlog where a message body copies a record header that names its own position: to
the range planner's search it looks like a record (``commitlog_segment.find_record``)."""

import shutil
from pathlib import Path

from pipelines.synthetic import Written, mixed_messages, write_commitlog
from rmqstore.formats import commitlog as cl

SEGMENT_SIZE = 64 * 1024
_FILL = b"\xee" * 600


def forged_store(root: Path) -> tuple[Path, list[Written], int]:
    """(store, what was written, the position of the fake header in the first segment): a
    split size of that position puts the first cut on it, inside a record."""
    messages = list(mixed_messages(400, body_size=120))
    carrier = messages[150]
    carrier.body = _FILL
    store = root / "store"
    written = write_commitlog(store, messages, SEGMENT_SIZE)
    at = written[150].phy_offset
    assert at + written[150].size < SEGMENT_SIZE  # in the first segment, whose offsets are 0..
    with open(store / "commitlog" / f"{0:020d}", "rb") as f:
        at = f.read(SEGMENT_SIZE).index(_FILL, at) + 100
    fake = cl.HEAD.pack(64, cl.MAGIC_V1, 0, 0, 0, 0, at, 0, 0)  # its offset field: ``at``
    carrier.body = _FILL[:100] + fake + _FILL[100 + len(fake) :]
    shutil.rmtree(store)
    assert write_commitlog(store, messages, SEGMENT_SIZE) == written  # same sizes, same places
    return store, written, at
