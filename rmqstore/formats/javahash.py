"""Java hashing as RocketMQ uses it, over UTF-16 code units.

* ``java_hash(s)``: ``String.hashCode()`` as a signed 32-bit int.
* ``index_hash(s)``: ``abs(hashCode)`` with ``Integer.MIN_VALUE`` mapped to 0 (index files).
* ``tags_code(tags)``: the consume-queue tags code, the tag hash sign-extended to 64 bits.
* ``index_hashes(keys)``: ``index_hash`` of many keys at once with numpy.
* ``utf8_span_hashes(data, starts, ends, prefixes)``: ``hashCode`` of many UTF-8 texts lying
  in one byte array, each optionally after a prefix whose hash is given, with numpy.
"""

import functools
from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

_MASK = 0xFFFFFFFF
_MIN_INT = -(1 << 31)


def _to_signed(h: int) -> int:
    return h - (1 << 32) if h & 0x80000000 else h


# ``hashCode`` of ASCII text is the text's bytes read as the digits of a base-31 numeral
# (sum of b * 31**k), except that a byte is no base-31 digit. Each byte b is split into
# b // 31 and b % 31 (both digits, b < 128), and ``int(..., 31)`` reads the two numerals in C.
_BASE31 = b"0123456789abcdefghijklmnopqrstu"
_LOW = bytes(_BASE31[b % 31] for b in range(256))
_HIGH = bytes(_BASE31[b // 31 % 31] for b in range(256))
_NUMERAL = 2048  # bytes read at a time: int() refuses numerals of over 4,300 digits
_NUMERAL_SHIFT = pow(31, _NUMERAL, 1 << 32)


def _ascii_hash(data: bytes) -> int:
    """``hashCode`` of ASCII bytes, unsigned (h * 31**n + tail's hash, numeral by numeral)."""
    if not data:
        return 0
    if len(data) <= _NUMERAL:
        return (int(data.translate(_LOW), 31) + 31 * int(data.translate(_HIGH), 31)) & _MASK
    h = 0
    for at in range(0, len(data), _NUMERAL):
        part = data[at : at + _NUMERAL]
        shift = _NUMERAL_SHIFT if len(part) == _NUMERAL else pow(31, len(part), 1 << 32)
        low, high = int(part.translate(_LOW), 31), int(part.translate(_HIGH), 31)
        h = (h * shift + low + 31 * high) & _MASK
    return h


def java_hash(s: str) -> int:
    """``String.hashCode()``: h = 31*h + unit over UTF-16 units, as signed int32."""
    if s.isascii():
        return _to_signed(_ascii_hash(s.encode("ascii")))
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & _MASK
    return _to_signed(h)


def index_hash(key: str) -> int:
    """Index-file key hash: ``Math.abs(hashCode)``, 0 when that overflows."""
    h = _ascii_hash(key.encode("ascii")) if key.isascii() else java_hash(key) & _MASK
    if h < 0x8000_0000:
        return h
    return 0 if h == 0x8000_0000 else (1 << 32) - h  # |int32|; MIN_VALUE's overflows: 0


def tags_code(tags: str | None) -> int:
    """Consume-queue tags code of a TAGS value: its hash as a signed 64-bit value; 0 if empty."""
    return java_hash(tags) if tags else 0


def utf16_len(s: str) -> int:
    """Java ``String.length()``: characters outside the BMP count twice."""
    return len(s) if s.isascii() else len(s.encode("utf-16-be")) // 2


_POWER_TABLES: dict[int, np.ndarray] = {}


def _powers(n: int, base: int = 31) -> np.ndarray:
    """base**k mod 2**32 for k in [0, n), as uint64, from a table kept per base."""
    table = _POWER_TABLES.get(base)
    if table is None or len(table) < n:
        table = np.empty(max(n, 64 if table is None else 2 * len(table)), dtype=np.uint64)
        acc = 1
        for k in range(len(table)):
            table[k] = acc
            acc = (acc * base) & _MASK
        _POWER_TABLES[base] = table
    return table[:n]


_INV31 = pow(31, -1, 1 << 32)  # 31 is odd, so invertible modulo 2**32
_SHORT_KEY = 64  # keys up to this long are hashed as rows of one padded matrix
_CHUNK = 65_536  # keys per matrix (bounds its memory: 16 MiB of code points)
_SMALL_SPANS = 32_768  # spans x longest span up to this: one padded matrix of their bytes
_MASKS_UP_TO = 128  # spans up to this long are masked with a cached table


def index_hashes(keys: Sequence[str]) -> np.ndarray:
    """``index_hash`` of every key, vectorized; returns int32 values (all >= 0)."""
    n = len(keys)
    h = np.empty(n, dtype=np.uint32)
    for at in range(0, n, _CHUNK):
        chunk = keys[at : at + _CHUNK]
        h[at : at + len(chunk)] = _hashes_padded(chunk)
    return index_hashes_of(h)


def index_hashes_of(hash_codes: np.ndarray) -> np.ndarray:
    """``index_hash`` from ``hashCode``s given as uint32: int32 values, all >= 0."""
    signed = hash_codes.astype(np.uint32).view(np.int32).astype(np.int64)
    out = np.abs(signed)
    out[signed == _MIN_INT] = 0
    return out.astype(np.int32)


def utf8_span_hashes(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    prefixes: np.ndarray | None = None,
) -> np.ndarray:
    """``hashCode`` (as uint32) of the UTF-8 texts ``data[starts[i]:ends[i]]`` (uint8 data),
    each read as if ``prefixes[i]``, the hashCode of some text before it, came first.

    Few short spans (a builder's batch) are hashed as rows of one padded matrix of their
    bytes, a fixed handful of array operations; many (a rebuild's range) by Horner's rule a
    byte position at a time, so that nothing as large as the data is allocated. ASCII spans
    are done so; the others (rare) are decoded one by one, so that their UTF-16 units count
    as Java counts them. Spans must hold valid UTF-8.
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(ends, dtype=np.int64) - starts
    n = len(starts)
    longest = int(lengths.max()) if n else 0
    high: np.ndarray | None
    if n * longest <= _SMALL_SPANS:
        out, high = _span_hashes_padded(data, starts + lengths, lengths, longest)
        if prefixes is not None:
            out += prefixes.astype(np.uint32) * _powers(longest + 1)[lengths].astype(np.uint32)
    else:
        out, high = _span_hashes_horner(data, starts, lengths, prefixes)
    for i in [] if high is None else np.flatnonzero(high >= 0x80).tolist():
        text = bytes(data[starts[i] : starts[i] + lengths[i]]).decode("utf-8")
        code = java_hash(text) & _MASK
        if prefixes is not None:
            code = (int(prefixes[i]) * pow(31, utf16_len(text), 1 << 32) + code) & _MASK
        out[i] = code
    return out


def _span_hashes_padded(
    data: np.ndarray, ends: np.ndarray, lengths: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """Hash codes of spans (no prefixes) as rows of ``width`` bytes, each span right-aligned
    after zeros (leading zeros leave the hash unchanged): a row's hash is its dot product
    with 31**(width-1-k), wrapping modulo 2**32. Also each row's largest byte, or None when
    all are ASCII."""
    # the row of a span ending at e is padded[e : e + width] (data behind ``width`` zeros),
    # copied whole; bytes before the span's start are masked to zero
    padded = np.concatenate((np.zeros(width, dtype=np.uint8), data))
    units = sliding_window_view(padded, width)[ends]
    if width <= _MASKS_UP_TO:
        units *= _keep_last(width)[lengths]
    else:
        units *= np.arange(width) >= (width - lengths)[:, None]
    codes = units @ _powers(width)[::-1].astype(np.uint32)  # uint32: wraps modulo 2**32
    return codes, (units.max(axis=1) if units.max(initial=0) >= 0x80 else None)


@functools.lru_cache(maxsize=256)
def _keep_last(width: int) -> np.ndarray:
    """Row k: ``width`` bytes, the last k of them 1, the others 0 (uint8)."""
    cols = np.arange(width)
    return (cols >= width - np.arange(width + 1)[:, None]).astype(np.uint8)


def _span_hashes_horner(
    data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, prefixes: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """``utf8_span_hashes`` by Horner's rule a byte position at a time over the spans sorted
    longest first (step k works on the spans longer than k); and each span's largest byte."""
    n = len(starts)
    order = np.argsort(-lengths, kind="stable")
    at, longest_first = starts[order], lengths[order]
    h = np.zeros(n, dtype=np.uint32) if prefixes is None else prefixes[order].astype(np.uint32)
    high = np.zeros(n, dtype=np.uint8)
    shorter = longest_first[::-1]  # ascending, to count the spans longer than k
    for k in range(int(longest_first[0]) if n else 0):
        m = n - int(np.searchsorted(shorter, k, side="right"))
        unit = data[at[:m] + k]
        h[:m] *= np.uint32(31)
        h[:m] += unit
        np.maximum(high[:m], unit, out=high[:m])
    out, top = np.empty(n, dtype=np.uint32), np.empty(n, dtype=np.uint8)
    out[order], top[order] = h, high
    return out, top


def _hashes_padded(keys: Sequence[str]) -> np.ndarray:
    """``String.hashCode`` (as uint32) of keys of at most _SHORT_KEY UTF-16 units, by Horner's
    rule down the columns of a zero-padded matrix of code points; other keys go to
    ``_hashes_prefix``. A key padded with k zeros hashes to hashCode * 31**k (mod 2**32), which
    the inverse of 31**k undoes."""
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    if not len(keys) or lengths.max() > _SHORT_KEY:
        return _hashes_prefix(keys)
    points = np.array(keys)  # dtype <U{width}: code points, zeros after each key
    width = points.dtype.itemsize // 4
    rows = points.view(np.uint32).reshape(len(keys), width)
    if not "".join(keys).isascii() and rows.max() > 0xFFFF:
        return _hashes_prefix(keys)  # a surrogate pair is two UTF-16 units
    h = np.zeros(len(keys), dtype=np.uint32)
    for column in np.ascontiguousarray(rows.T):
        h *= np.uint32(31)
        h += column
    h *= _powers(width + 1, _INV31)[width - lengths].astype(np.uint32)
    return h


def _hashes_prefix(keys: Sequence[str]) -> np.ndarray:
    """``String.hashCode`` (as uint32) of any keys, from prefix sums over all their UTF-16
    units."""
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.uint32)
    joined = "".join(keys)
    if joined.isascii():
        units = np.frombuffer(joined.encode("ascii"), dtype=np.uint8).astype(np.uint64)
        lengths = np.fromiter((len(k) for k in keys), dtype=np.int64, count=n)
    else:
        units = np.frombuffer(joined.encode("utf-16-be"), dtype=">u2").astype(np.uint64)
        lengths = np.fromiter((utf16_len(k) for k in keys), dtype=np.int64, count=n)
    ends = np.cumsum(lengths)
    # unit j of key i has weight 31**(end_i - 1 - j); uint64 sums wrap mod 2**64, a multiple
    # of 2**32, so prefix-sum differences stay exact modulo 2**32.
    key_of_unit = np.repeat(np.arange(n), lengths)
    exps = ends[key_of_unit] - 1 - np.arange(len(units))
    products = units * _powers(int(lengths.max(initial=0)) + 1)[exps]
    prefix = np.concatenate((np.zeros(1, dtype=np.uint64), np.cumsum(products, dtype=np.uint64)))
    sums = prefix[ends] - prefix[ends - lengths]
    return (sums & _MASK).astype(np.uint32)
