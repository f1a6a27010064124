"""The store hosts a store's records have carried: ``rmqstore/store-hosts.json``.

A record's store host (its writer's ``--store-host``, RocketMQ's ``brokerIP1`` and port) is
part of its offset message id. When a broker moves to another address, ids handed out before
still name the old one; a cluster-wide lookup by id goes straight to the broker whose history
holds the id's host instead of asking every broker. The writer adds its store host each time
it starts taking puts (at start as a master, at a promotion) when it differs from the last
one; the query service announces the list with its cluster entry.

File (written whole or not at all), oldest first::

    [{"host": "10.0.0.5:10911", "since_offset": 0, "since_ms": 1764300000000}, ...]

A slave appends nothing: its records carry its master's host, which the master's history
holds.
"""

import json
import logging
import time
from pathlib import Path

from rmqstore.durable import replace_file
from rmqstore.layout import StoreLayout

log = logging.getLogger(__name__)
FILE = "store-hosts.json"


def path(layout: StoreLayout) -> Path:
    return layout.own_dir / FILE


def recorded(layout: StoreLayout) -> list[str]:
    """The hosts, oldest first; [] when none is recorded or the file is unreadable (one log
    line: the history only saves a lookup's fan-out, it is never needed to find a message)."""
    try:
        got = json.loads(path(layout).read_text())
        return [str(entry["host"]) for entry in got]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("%s is unreadable (%r): offset ids of older store hosts are looked up on "
                    "every broker", path(layout), e)  # fmt: skip
        return []


def remember(layout: StoreLayout, host: str, offset: int) -> bool:
    """Add ``host`` (IP:PORT) from commit-log ``offset`` on unless it is the last one kept.
    True when it was added."""
    try:
        entries = json.loads(path(layout).read_text())
        if not isinstance(entries, list):
            raise ValueError("not a list")
    except FileNotFoundError:
        entries = []
    except (OSError, ValueError) as e:
        log.warning("%s is unreadable (%r): started again", path(layout), e)
        entries = []
    if entries and isinstance(entries[-1], dict) and entries[-1].get("host") == host:
        return False
    entries.append({"host": host, "since_offset": offset, "since_ms": int(time.time() * 1000)})
    replace_file(path(layout), json.dumps(entries, separators=(",", ":")).encode())
    return True
