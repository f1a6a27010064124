"""A store's identity: who may talk to whom.

The writer announces its store's id (``Offsets.store_id``); the builders and the query service
compare it with the id of the store directory they were given and refuse a writer of another
store, and send the id they expect with their subscriptions and reads, which the writer
refuses when it is not its own. So no process ever builds or answers from another store's
records, even when addresses are mixed up.

The id is a random UUID the writer creates with the store, kept in ``rmqstore/store-id``::

    rmqstore/store-id   "<32 hex digits>\\n"    (written once, atomically, durably)

A store nobody may write into (served ``--read-only``, or never opened by a writer yet) has
no such file; its id is then derived from its content, which nobody changes:
``ro-`` + the first 32 hex digits of SHA-256 over the first commitlog segment's name and first
64 KiB (``ro-empty`` without a commitlog). Every process derives the same id from the same
files, without writing a byte.
"""

import hashlib
import re
import uuid

from rmqstore.durable import replace_file
from rmqstore.layout import StoreLayout
from rmqstore.segments import parse_segment_name

_ID = re.compile(r"[0-9a-f]{32}")
DERIVED_PREFIX = "ro-"
_HEAD_BYTES = 64 * 1024


def read(layout: StoreLayout) -> str | None:
    """The id kept in the store, or None when it has none (a bad file is an error)."""
    try:
        text = layout.store_id.read_text().strip()
    except FileNotFoundError:
        return None
    if not _ID.fullmatch(text):
        raise ValueError(f"{layout.store_id} does not hold a store id (32 hex digits)")
    return text


def derived(layout: StoreLayout) -> str:
    """The id of a store without an id file, from its first commitlog segment."""
    try:
        names = sorted(p.name for p in layout.commitlog_dir.iterdir()
                       if parse_segment_name(p.name) is not None and p.is_file())
    except FileNotFoundError:
        names = []
    if not names:
        return DERIVED_PREFIX + "empty"
    first = layout.commitlog_dir / names[0]
    with open(first, "rb") as f:
        head = f.read(_HEAD_BYTES)
    digest = hashlib.sha256(names[0].encode() + b"\0" + head).hexdigest()
    return DERIVED_PREFIX + digest[:32]


def expected(layout: StoreLayout) -> str:
    """The id a builder or the query service expects of its writer (never writes)."""
    return read(layout) or derived(layout)


def create_or_read(layout: StoreLayout) -> str:
    """The writer's id for its store: the kept one, or a new one kept from now on."""
    found = read(layout)
    if found:
        return found
    new = uuid.uuid4().hex
    replace_file(layout.store_id, (new + "\n").encode())
    return new


def mismatch(expected_id: str, announced: str, address: str, store: str) -> str:
    """The one-line refusal of a writer of another store."""
    return (f"the writer at {address} serves another store (id {announced or 'none'}), "
            f"not {store} (id {expected_id}): refusing it")
