"""Java hashing (spec TV1, TV2, TV17): String.hashCode, index hash, tags code, numpy batch."""

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqstore.formats.javahash import index_hash, index_hashes, java_hash, tags_code, utf16_len

DEFAULT_SLOTS = 5_000_000

# key, UTF-16 length, UTF-8 length, hashCode, index hash, slot in 5,000,000 slots (spec TV1)
TV1 = [
    ("", 0, 0, 0, 0, 0),
    ("a", 1, 1, 97, 97, 97),
    ("Aa", 2, 2, 2112, 2112, 2112),
    ("BB", 2, 2, 2112, 2112, 2112),
    ("TagA", 4, 4, 2598919, 2598919, 2598919),
    ("TAG1", 4, 4, 2567159, 2567159, 2567159),
    ("Hello", 5, 5, 69609650, 69609650, 4609650),
    ("TopicTest#KEY1", 14, 14, -1656969516, 1656969516, 1969516),
    ("TopicTest#order_10086", 21, 21, -570327748, 570327748, 327748),
    ("FooBar#Hello", 12, 12, -101609924, 101609924, 1609924),
    ("topic#中文", 8, 12, -956706610, 956706610, 1706610),
    ("t#café", 6, 7, -938616624, 938616624, 3616624),
    ("t#\U0001f600", 4, 6, 5262290, 5262290, 262290),
    ("polygenelubricants", 18, 18, -2147483648, 0, 0),
    ("TopicTest#7F0000010B6E18B4AAC23E9C5AD50000", 42, 42, -20133676, 20133676, 133676),
    ("SCHEDULE_TOPIC_XXXX", 19, 19, -1995822632, 1995822632, 822632),
]


@pytest.mark.parametrize(("key", "u16", "u8", "hash_code", "ihash", "slot"), TV1)
def test_tv1_hash_index_hash_and_slot(key, u16, u8, hash_code, ihash, slot):
    assert utf16_len(key) == u16
    assert len(key.encode()) == u8
    assert java_hash(key) == hash_code
    assert index_hash(key) == ihash
    assert index_hash(key) % DEFAULT_SLOTS == slot
    assert int(index_hashes([key])[0]) == ihash


def test_tv1_tiered_test_key():
    assert java_hash("TopicTest#MessageKey") == 638347386


def test_tv1_slot_byte_position():
    # slot byte position = 40 + 4 * slot
    assert 40 + 4 * (index_hash("Hello") % DEFAULT_SLOTS) == 40 + 4 * 4609650


@pytest.mark.parametrize(
    ("tags", "code", "raw_hex"),
    [
        ("TagA", 2598919, "000000000027a807"),
        ("shipment_created", -935240381, "ffffffffc8415d43"),
        ("PaySuccess", -1841465765, None),
        ("refund", -934813832, "ffffffffc847df78"),
        ("", 0, "0000000000000000"),
        (None, 0, "0000000000000000"),
    ],
)
def test_tv2_tags_code_is_sign_extended(tags, code, raw_hex):
    assert tags_code(tags) == code
    if raw_hex is not None:
        assert tags_code(tags).to_bytes(8, "big", signed=True).hex() == raw_hex


def test_tv17_java_pitfalls():
    # Math.abs(Integer.MIN_VALUE) stays negative in Java: the index hash maps it to 0 ...
    assert java_hash("polygenelubricants") == -(2**31)
    assert index_hash("polygenelubricants") == 0
    # ... where a naive Python abs lands in the wrong slot
    assert abs(java_hash("polygenelubricants")) % DEFAULT_SLOTS == 2483648
    assert index_hash("polygenelubricants") % DEFAULT_SLOTS == 0


def _reference_hash(s: str) -> int:
    """The spec's reference helper (§11), written out independently of the module."""
    d = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(d), 2):
        h = (31 * h + (d[i] << 8 | d[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _reference_index_hash(s: str) -> int:
    h = _reference_hash(s)
    return 0 if h == -(2**31) else abs(h)


# any code point except lone surrogates (not encodable); astral ones become surrogate pairs
_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(st.lists(_text, max_size=30))
def test_index_hashes_agree_with_index_hash(keys):
    got = index_hashes(keys)
    assert got.dtype == np.int32
    assert got.tolist() == [index_hash(k) for k in keys] == [_reference_index_hash(k) for k in keys]
    assert [java_hash(k) for k in keys] == [_reference_hash(k) for k in keys]


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=5000))
def test_java_hash_of_ascii_keys_of_any_length(key):
    assert java_hash(key) == _reference_hash(key)
    assert index_hash(key) == _reference_index_hash(key)


@pytest.mark.parametrize("length", [0, 1, 2047, 2048, 2049, 4096, 4301, 20_000])
def test_java_hash_of_long_ascii_keys(length):
    key = "".join(chr(i * 7 % 128) for i in range(length))  # every byte value, NUL and DEL too
    assert java_hash(key) == _reference_hash(key)
    assert index_hash(key) == _reference_index_hash(key)


def test_index_hashes_mixed_batch_with_min_value_surrogates_and_long_keys():
    rng = random.Random(7)
    keys = ["polygenelubricants", "", "t#\U0001f600", "topic#中文", "Aa", "BB"]
    keys += ["".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(rng.randrange(0, 300)))
             for _ in range(300)]
    keys += ["x" * 5000, "T#" + "\U0001f600" * 100]
    got = index_hashes(keys).tolist()
    assert got == [_reference_index_hash(k) for k in keys]
    assert got[0] == 0
    assert len(index_hashes([])) == 0


def test_index_hashes_of_many_short_keys_cross_chunks():
    """Short keys take the padded-matrix path, in chunks; trailing NULs, empty keys,
    non-ASCII BMP keys and the MIN_VALUE key included, and the chunk with one long key."""
    rng = random.Random(11)
    keys = ["polygenelubricants", "", "a\x00", "\x00\x00", "topic#中文", "Aa", "BB"]
    keys += [f"BenchTopic#order-{i}" for i in range(70_000)]
    keys += ["".join(chr(rng.randrange(1, 0xD7FF)) for _ in range(rng.randrange(0, 64)))
             for _ in range(500)]  # fmt: skip
    keys.insert(66_000, "y" * 200)  # sends its chunk the prefix-sum way
    assert index_hashes(keys).tolist() == [index_hash(k) for k in keys]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_text, _text), max_size=30))
def test_utf8_span_hashes_of_texts_after_prefixes(pairs):
    from rmqstore.formats import javahash
    from rmqstore.formats.javahash import index_hashes_of, utf8_span_hashes

    data = b"".join(t.encode() for _, t in pairs)
    ends = np.cumsum([len(t.encode()) for _, t in pairs], dtype=np.int64)
    starts = ends - [len(t.encode()) for _, t in pairs]
    arr = np.frombuffer(data, dtype=np.uint8)
    prefixes = np.array([java_hash(pre) & 0xFFFFFFFF for pre, _ in pairs], dtype=np.uint32)
    small, masks = javahash._SMALL_SPANS, javahash._MASKS_UP_TO
    try:
        # as a padded matrix masked from the cached table, then masked by comparison, then
        # by Horner's rule
        for javahash._SMALL_SPANS, javahash._MASKS_UP_TO in ((small, masks), (small, 0), (0, 0)):
            plain = utf8_span_hashes(arr, starts, ends)
            assert plain.tolist() == [java_hash(t) & 0xFFFFFFFF for _, t in pairs]
            joined = utf8_span_hashes(arr, starts, ends, prefixes)
            assert index_hashes_of(joined).tolist() == [index_hash(pre + t) for pre, t in pairs]
    finally:
        javahash._SMALL_SPANS, javahash._MASKS_UP_TO = small, masks
