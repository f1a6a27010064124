"""How a message body is shown: as text, as pretty JSON or as a hex dump, never as HTML.

The shown part is cut at ``SHOW_LIMIT`` bytes (the page then says so); the raw download always
has the whole body.
"""

import json
from dataclasses import dataclass

SHOW_LIMIT = 64 * 1024
HEX_ROW = 16


@dataclass(frozen=True)
class BodyView:
    size: int  # bytes of the whole body
    kind: str  # "text", "json" or "hex"
    encoding: str  # what the bytes were read as: "UTF-8" or "binary"
    shown: str  # what the page shows (escaped by the template like any text)
    shown_bytes: int  # how many of the body's bytes ``shown`` covers

    @property
    def truncated(self) -> bool:
        return self.shown_bytes < self.size


def hex_dump(data: bytes) -> str:
    """``00000000  3c 73 63 72 ...  |<scr...|``: offset, 16 bytes in hex, printable ASCII."""
    rows = []
    for at in range(0, len(data), HEX_ROW):
        chunk = data[at:at + HEX_ROW]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        ascii_ = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk)
        rows.append(f"{at:08x}  {hexes:<{HEX_ROW * 3 - 1}}  |{ascii_}|")
    return "\n".join(rows)


def view(body: bytes, limit: int = SHOW_LIMIT) -> BodyView:
    """Text when the body is UTF-8 without control characters other than whitespace, pretty
    JSON when that text is a JSON document, a hex dump otherwise."""
    head = body[:limit]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        # a multi-byte character cut by the limit is still text
        if len(body) > limit and e.start >= limit - 3 and e.reason == "unexpected end of data":
            text = head[:e.start].decode("utf-8")
        else:
            text = ""
            head = b""
    if head and not any(ord(c) < 0x20 and c not in "\t\n\r" for c in text):
        if len(body) <= limit:
            try:
                doc = json.loads(text)
            except ValueError:
                pass
            else:
                if isinstance(doc, dict | list):
                    pretty = json.dumps(doc, indent=2, ensure_ascii=False)
                    return BodyView(len(body), "json", "UTF-8", pretty, len(body))
        return BodyView(len(body), "text", "UTF-8", text, len(text.encode()))
    if not body:
        return BodyView(0, "text", "UTF-8", "", 0)
    shown = body[:limit]
    return BodyView(len(body), "hex", "binary", hex_dump(shown), len(shown))
