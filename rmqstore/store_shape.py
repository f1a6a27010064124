"""File sizes an existing store was written with, read from its files.

A RocketMQ store may use other sizes than rmqstore's defaults (``mappedFileSizeCommitLog``,
``mappedFileSizeConsumeQueue``, ``maxHashSlotNum``/``maxIndexNum``). Each is read from the
files when there are any; a flag only overrides, and a flag that disagrees with the files is
an error naming it:

* commitlog segment size: the size of the segment files (all equal);
* consume-queue entries per file: a consume-queue file's size / 20;
* index slots and entries: an index file's size (see ``index_file.infer_shape``; a flag
  given for one of the two pins it).
"""

from collections.abc import Iterator
from pathlib import Path

from rmqstore.errors import InvalidArgumentError
from rmqstore.formats import consume_queue as cq
from rmqstore.formats import index_file as ixf
from rmqstore.layout import StoreLayout, is_index_file_name
from rmqstore.segments import parse_segment_name


def _segment_files(d: Path) -> list[Path]:
    try:
        return sorted(p for p in d.iterdir() if parse_segment_name(p.name) is not None
                      and p.is_file())
    except FileNotFoundError:
        return []


def _agree(flag: str, given: int | None, found: int | None, what: str, default: int) -> int:
    """``what`` says what the files hold, with ``{}`` for the number found."""
    if given is not None and found is not None and given != found:
        raise InvalidArgumentError(
            f"{flag} {given} does not match the store: {what.format(found)}; leave {flag} "
            "out to use the files' size")
    if given is not None:
        return given
    return found if found is not None else default


def segment_size(layout: StoreLayout, given: int | None, default: int) -> int:
    """The commitlog segment size: the files', ``given`` (which must agree), or ``default``."""
    sizes = {p.stat().st_size for p in _segment_files(layout.commitlog_dir)}
    if len(sizes) > 1 and given is None:
        raise InvalidArgumentError(
            f"the commitlog segments in {layout.commitlog_dir} have different sizes "
            f"{sorted(sizes)}: give --commitlog-segment-size")
    found = max(sizes) if sizes else None
    return _agree("--commitlog-segment-size", given, found, "its commitlog segments are {} bytes",
                  default)


def _queue_files(layout: StoreLayout) -> Iterator[Path]:
    for _topic, _qid, qdir in layout.queues():
        yield from _segment_files(qdir)


def cq_entries_per_file(layout: StoreLayout, given: int | None, default: int) -> int:
    """Consume-queue entries per file: the files' (size / 20), ``given``, or ``default``."""
    found = None
    for path in _queue_files(layout):
        size = path.stat().st_size
        if size and size % cq.UNIT_SIZE == 0:
            found = size // cq.UNIT_SIZE
            break
    return _agree("--cq-entries-per-file", given, found,
                  "its consume-queue files hold {} entries each", default)


def index_shape(layout: StoreLayout, slots: int | None, entries: int | None
                ) -> tuple[int, int]:
    """(slots, entries) of the index files: from an index file's size (a flag pins one of
    them, and a flag that cannot match the size is an error), else the flags or defaults."""
    try:
        names = sorted(p for p in layout.index_dir.iterdir() if is_index_file_name(p.name))
    except FileNotFoundError:
        names = []
    if not names:
        return (slots or ixf.DEFAULT_SLOTS, entries or ixf.DEFAULT_ENTRIES)
    size = names[0].stat().st_size
    try:
        return ixf.infer_shape(size, slots, entries, str(names[0]))
    except InvalidArgumentError as e:
        flags = " ".join(f"{f} {v}" for f, v in (("--index-slots", slots),
                                                  ("--index-entries", entries)) if v is not None)
        raise InvalidArgumentError(f"{flags or '--index-slots/--index-entries'}: {e}") from None
