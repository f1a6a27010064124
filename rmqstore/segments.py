"""Segment file naming: a file is named by its first byte offset, 20 digits, zero-padded."""

import re

NAME_DIGITS = 20
_NAME = re.compile(r"\d{20}")


def segment_name(offset: int) -> str:
    return f"{offset:0{NAME_DIGITS}d}"


def parse_segment_name(name: str) -> int | None:
    """Start offset of a segment file name, or None when the name is not one."""
    return int(name) if _NAME.fullmatch(name) else None


def segment_start(offset: int, segment_size: int) -> int:
    return offset - offset % segment_size


def roll_next(offset: int, segment_size: int) -> int:
    """First offset of the segment after the one holding ``offset``."""
    return offset + segment_size - offset % segment_size
