"""On-disk formats: pure functions over buffers, no file I/O."""

import mmap

import numpy as np

BytesLike = bytes | bytearray | memoryview | mmap.mmap
"""Anything the decoders read from: bytes, a bytearray, a memoryview or an mmap."""


def byte_windows(data: np.ndarray, size: int) -> np.ndarray:
    """The ``size`` bytes starting at every position of ``data`` (uint8, contiguous, at least
    ``size`` long) as one void item each: a view with a stride of one byte, no copy, so that
    indexing it with positions copies one value per position."""
    return np.ndarray((len(data) - size + 1,), dtype=f"V{size}", buffer=data, strides=(1,))
