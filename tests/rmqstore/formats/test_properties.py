"""Properties string (spec §2.6, TV12): Java HashMap order, separators, parse quirks."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqstore.formats import properties as p

UNIQ = "7F0000010B6E18B4AAC23E9C5AD50000"
CLIENT = {"KEYS": "order_10086", "TAGS": "TagA", "WAIT": "true", "UNIQ_KEY": UNIQ,
          "CLUSTER": "DefaultCluster"}


def _bucket(name: str, cap: int) -> int:
    h = p.java_hash(name) & 0xFFFFFFFF
    return (h ^ (h >> 16)) & (cap - 1)


@pytest.mark.parametrize(
    ("cap", "buckets"),
    [
        (16, {"KEYS": 7, "UNIQ_KEY": 12, "CLUSTER": 12, "WAIT": 13, "TAGS": 14}),
        (128, {"UNIQ_KEY": 28, "CLUSTER": 28, "TAGS": 62, "KEYS": 87, "WAIT": 93}),
    ],
)
def test_tv12_buckets(cap, buckets):
    assert {k: _bucket(k, cap) for k in buckets} == buckets


def test_tv12_order_4_9():
    s = p.encode(CLIENT)
    assert s == (
        f"KEYS\x01order_10086\x02UNIQ_KEY\x01{UNIQ}\x02CLUSTER\x01DefaultCluster"
        "\x02WAIT\x01true\x02TAGS\x01TagA"
    )
    assert not s.endswith("\x02")  # 4.9 drops the trailing separator


def test_tv4_properties_string():
    s = p.encode({"KEYS": "order_10086", "TAGS": "TagA", "UNIQ_KEY": UNIQ,
                  "CLUSTER": "DefaultCluster"})
    assert s == (f"KEYS\x01order_10086\x02UNIQ_KEY\x01{UNIQ}\x02CLUSTER\x01DefaultCluster"
                 "\x02TAGS\x01TagA")
    assert len(s.encode()) == 91


def test_capacity_follows_max_size_reached():
    assert p.hashmap_capacity(12) == 16
    assert p.hashmap_capacity(13) == 32
    assert p.hashmap_capacity(0) == 16
    # a map that once held 13 entries keeps its 32-slot table: order may differ from 16 slots
    names = [f"k{i}" for i in range(13)]
    assert p.hashmap_order(names) == sorted(names, key=lambda k: _bucket(k, 32))
    small = names[:5]
    assert p.hashmap_order(small, max_size=13) == sorted(small, key=lambda k: _bucket(k, 32))
    assert p.hashmap_order(small) == sorted(small, key=lambda k: _bucket(k, 16))


def test_empty_map_is_empty_string():
    assert p.encode({}) == ""
    assert p.parse("") == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("k1\x01v1\x02\x01v2", {"k1": "v1"}),  # TV12
        ("1\x011\x022\x012", {"1": "1", "2": "2"}),  # TV12: 3-character entries are kept
        ("k1\x01\x02k2\x01v2", {"k2": "v2"}),  # TV12: empty value dropped
        ("k\x01", {}),  # §2.6: missing value
        ("\x01v", {}),  # §2.6: missing key
        ("ab", {}),  # §2.6: no separator
        ("aaa", {}),
        (" ", {}),
        ("k\x01v\x02", {"k": "v"}),  # trailing separator (5.2+ writes one)
        ("a\x011\x02a\x012", {"a": "2"}),  # a later duplicate overwrites
        ("abc\x02k\x01v", {"k": "v"}),  # a segment without 0x01 is skipped
        ("ab\x02\x02k\x01v", {"k": "v"}),
        ("k\x01v\x01w", {"k": "v\x01w"}),  # only the first 0x01 splits
    ],
)
def test_parse_edge_cases(text, expected):
    assert p.parse(text) == expected


def test_parse_inverts_encode():
    assert p.parse(p.encode(CLIENT)) == CLIENT


def test_separator_check():
    assert p.has_separator("a\x01b") and p.has_separator("a\x02") and not p.has_separator("ab")


def _reference_parse(s: str) -> dict[str, str]:
    """The spec's index-walking description of string2messageProperties (spec §2.6)."""
    out: dict[str, str] = {}
    i, n = 0, len(s)
    while i < n:
        j = s.find("\x02", i)
        j = n if j < 0 else j
        if j - i >= 3:
            k = s.find("\x01", i)
            if i < k < j - 1:
                out[s[i:k]] = s[k + 1 : j]
        i = j + 1
    return out


@given(st.text(alphabet="ab\x01\x02", max_size=16))
@settings(max_examples=300)
def test_parse_matches_the_spec_walk(s):
    assert p.parse(s) == _reference_parse(s)


_piece = st.sampled_from(["KEYS", "TAGS", "K", "\x01", "\x02", "a", "中", " ", "UNIQ_KEY", ""])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_piece, max_size=12).map("".join), min_size=1, max_size=6))
def test_values_in_many_records_read_as_parse_reads_each(records):
    import numpy as np

    encoded = [r.encode() for r in records]
    blob, marks = p.joined(encoded, np.array([len(e) for e in encoded]))
    assert bytes(blob) == b"".join(b"\x02" + e for e in encoded)
    for name in ("KEYS", "TAGS", "UNIQ_KEY"):
        start, end = p.values_in(blob, marks, name)
        got = [None if a < 0 else bytes(blob[a:b]).decode()
               for a, b in zip(start, end, strict=True)]
        assert got == [p.parse(r).get(name) for r in records]
