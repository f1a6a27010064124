"""A promotion outlives the process: ``rmqstore/promoted.json`` keeps the role it gave.

Service managers and Kubernetes restart a writer with the command line it was first given.
A promoted slave's says ``--role slave --ha-master <its former master>``: without this record
it would come back following the master it replaced (or waiting for it), and its producers
would find no master. With it, a writer started as a slave on a promoted store starts as
the master the promotion made it (its role and HA port; ``--ha-port`` wins), ignores
``--ha-master``, and says so in one line. ``--demote`` (with ``--role slave``) forgets the
record and starts the slave as asked: the way back, after which the store rejoins a master
as any former master does (``rejoin.py``). A writer started as a master keeps the record
(its command line chooses between async and sync).
"""

import dataclasses
import json
import logging
from pathlib import Path

from rmqstore.durable import replace_file
from rmqstore.layout import StoreLayout

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Promoted:
    role: str  # async_master or sync_master
    ha_port: int
    former_master: str  # the HA address it followed
    term: int  # the master term the promotion began


def path(layout: StoreLayout) -> Path:
    return layout.own_dir / "promoted.json"


def record(layout: StoreLayout, promoted: Promoted) -> None:
    """Keep ``promoted`` durably (written whole or not at all)."""
    replace_file(path(layout), json.dumps(dataclasses.asdict(promoted)).encode())


def recorded(layout: StoreLayout) -> Promoted | None:
    """The promotion this store had, if any; ValueError naming the file if it is damaged."""
    try:
        raw = path(layout).read_text()
    except FileNotFoundError:
        return None
    try:
        got = json.loads(raw)
        return Promoted(str(got["role"]), int(got["ha_port"]), str(got["former_master"]),
                        int(got["term"]))  # fmt: skip
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path(layout)} is damaged ({e!r}): start the writer with its role "
                         "(a master's, or --role slave --demote)") from None  # fmt: skip


def forget(layout: StoreLayout) -> None:
    path(layout).unlink(missing_ok=True)
