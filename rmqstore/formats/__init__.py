"""On-disk formats: pure functions over buffers, no file I/O."""

import mmap

BytesLike = bytes | bytearray | memoryview | mmap.mmap
"""Anything the decoders read from: bytes, a bytearray, a memoryview or an mmap."""
