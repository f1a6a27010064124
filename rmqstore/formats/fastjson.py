"""fastjson's text, as RocketMQ's broker writes its ``config/*.json`` files.

Two quirks the standard library does not share:

* PrettyFormat: tabs, no space after ``:``; an object is opened, one member a line, closed
  on its own line at the parent's indentation;
* a map with integer keys (``consumerOffset.json``'s queue ids) is written with the keys
  unquoted and on one line, the closing brace on the next: ``{0:12,1:7\\n\\t\\t}``.
  That is not strict JSON: ``quote_int_keys`` makes it so before ``json.loads``.
"""

import json
import re
from typing import Any

_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_INT_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")


def quote_int_keys(text: str) -> str:
    """``{0:12}`` → ``{"0":12}`` outside string literals; strict JSON comes out."""
    out: list[str] = []
    at = 0
    for m in _STRING.finditer(text):
        out.append(_INT_KEY.sub(r'\1"\2"\3', text[at : m.start()]))
        out.append(m.group())
        at = m.end()
    out.append(_INT_KEY.sub(r'\1"\2"\3', text[at:]))
    return "".join(out)


def loads(text: str) -> Any:
    """A fastjson text (integer keys unquoted or not) as Python values; ValueError if bad."""
    return json.loads(quote_int_keys(text))


class IntKeyMap(dict):
    """A map fastjson writes with integer keys: ``{0:12,1:7`` newline, indent, ``}``."""


def pretty(value: Any, depth: int = 0) -> str:
    """fastjson's PrettyFormat of objects, strings, numbers, bools (and ``IntKeyMap``s)."""
    if isinstance(value, IntKeyMap):
        pairs = ",".join(f"{int(k)}:{json.dumps(v)}" for k, v in value.items())
        return "{" + pairs + "\n" + "\t" * depth + "}"
    if isinstance(value, dict):
        if not value:
            return "{}"
        inner = "\t" * (depth + 1)
        items = [f"{inner}{json.dumps(k)}:{pretty(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + "\t" * depth + "}"
    return json.dumps(value, ensure_ascii=False)
