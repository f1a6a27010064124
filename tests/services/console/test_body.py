"""How bodies are shown: text, pretty JSON, hex with the size, cut at 64 KiB with a banner."""

from services.console.body import SHOW_LIMIT, hex_dump, view


def test_text_json_and_binary():
    assert view(b"hello").kind == "text"
    j = view(b'{"a": [1, 2]}')
    assert j.kind == "json" and j.shown == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    assert view(b'"just a string"').kind == "text"
    b = view(b"\x00\x01abc")
    assert (b.kind, b.encoding, b.size) == ("hex", "binary", 5)
    assert b.shown == "00000000  00 01 61 62 63" + " " * 33 + "  |..abc|"
    assert view(b"").size == 0


def test_bodies_over_the_limit_are_cut_and_say_so():
    big = ("é" * SHOW_LIMIT).encode()  # two bytes a character: the limit cuts one in half
    v = view(big)
    assert v.kind == "text" and v.truncated and v.size == len(big)
    assert v.shown_bytes <= SHOW_LIMIT and v.shown == "é" * (v.shown_bytes // 2)
    binary = bytes(SHOW_LIMIT + 10)
    vb = view(binary)
    assert vb.kind == "hex" and vb.truncated and vb.shown_bytes == SHOW_LIMIT
    assert vb.shown == hex_dump(binary[:SHOW_LIMIT])
    assert not view(b"x" * SHOW_LIMIT).truncated
