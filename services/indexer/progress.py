"""A builder's durable progress: the commitlog offset whose output is flushed to disk.

Stored as one small JSON document at ``layout.progress(name)``, replaced atomically
(temp file, fsync, rename, fsync of the directory), so a crash leaves the old or the new
record, never a torn one. Builders may add fields of their own (``extra``).
"""

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmqstore.durable import fsync_dir, replace_file  # noqa: F401  (fsync_dir re-used)
from rmqstore.errors import StoreError


class ProgressFileError(StoreError):
    """A progress record that cannot be read: the store needs a look before we go on."""

    grpc_status = "FAILED_PRECONDITION"


@dataclass
class Progress:
    offset: int
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class FlushTicket:
    """What one flush must make durable, captured under the builder's lock so the slow part
    (syncing files) can run while batches keep being applied."""

    record: Progress  # written once everything below is on disk
    paths: list[Path]  # data files to fdatasync
    dirs: list[Path]  # directories to fsync (children first)
    generation: int  # a truncate in between makes the ticket stale


def read(path: Path) -> Progress | None:
    """The stored progress, or None when the builder never recorded any."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(text)
        offset = int(doc["offset"])
    except (ValueError, KeyError, TypeError) as e:
        raise ProgressFileError(f"progress file {path} is unreadable: {e}") from e
    if offset < 0:
        raise ProgressFileError(f"progress file {path} holds a negative offset {offset}")
    return Progress(offset, {k: v for k, v in doc.items() if k != "offset"})


def write(path: Path, progress: Progress) -> None:
    """Replace the record atomically and durably."""
    replace_file(path, json.dumps({"offset": progress.offset, **progress.extra}).encode())


class FlushedOutput:
    """What both builders share about flushing: sync a ticket's files, then record it.

    Subclasses set ``progress_path``, ``durable_offset``, ``_generation`` (bumped by their
    truncate) and the flush counters, and capture tickets in ``begin_flush``.
    """

    progress_path: Path
    durable_offset: int
    _generation: int
    flushes: int
    last_flush_seconds: float
    total_flush_seconds: float

    def finish_flush(self, ticket: FlushTicket) -> int:
        """Sync, then record the ticket's state (may run while batches are being applied:
        the record describes only what was captured, and that is on disk by then)."""
        from services.indexer.mapped import sync_file

        t0 = time.perf_counter()
        for path in ticket.paths:
            sync_file(path)
        for d in ticket.dirs:
            fsync_dir(d)
        if ticket.generation != self._generation:  # a truncate came in between
            return self.durable_offset
        offset = ticket.record.offset
        if offset != self.durable_offset or not self.progress_path.exists():
            write(self.progress_path, ticket.record)
        self.durable_offset = offset
        self.last_flush_seconds = time.perf_counter() - t0
        self.total_flush_seconds += self.last_flush_seconds
        self.flushes += 1
        return self.durable_offset
