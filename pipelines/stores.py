"""The stores a job reads: ``--store PATH``, or ``--store NAME=PATH,NAME=PATH`` for the stores
of several brokers, each named by its broker.

One PATH is read as before and its rows carry no broker. A list (one entry or more) tags every
row with its entry's broker name; offsets stay each broker's own, so ``(broker, phy_offset)``
names a message. A value that is an existing directory is always one PATH (a path may hold
``=`` or ``,``). Everything is checked here, before any Spark session starts.
"""

import re
from dataclasses import dataclass
from pathlib import Path

from pipelines.source import commitlog_dir, list_segments
from rmqstore.errors import InvalidArgumentError

# a broker name: what a host name holds (the default of ``--broker-name``) and '_'
BROKER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,127}")  # fullmatch only


@dataclass(frozen=True)
class StoreRef:
    broker: str | None  # None: one unnamed store, rows without a broker
    path: Path  # the store root (or commitlog directory) as given


def check_broker_name(name: str) -> str:
    if not BROKER_NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"broker name {name[:140]!r} must be 1-127 characters of [A-Za-z0-9_.-]")
    return name


def parse_stores(value: str) -> list[StoreRef]:
    """``PATH`` or ``NAME=PATH,NAME=PATH,...``, checked: names valid and unique, each path
    a store root (holding ``commitlog/``) or a directory of commitlog segments, no commitlog
    twice. One PATH is checked as before: any directory (an empty one has no records)."""
    if "=" not in value or Path(value).is_dir():
        commitlog_dir(value)  # refuses what is not a directory
        return [StoreRef(None, Path(value))]
    stores: list[StoreRef] = []
    seen: dict[Path, str] = {}
    for item in value.split(","):
        name, sep, path = item.partition("=")
        if not sep or not path:
            raise InvalidArgumentError(
                f"--store entry {item!r}: expected NAME=PATH (a list is NAME=PATH,NAME=PATH)")
        check_broker_name(name)
        if any(s.broker == name for s in stores):
            raise InvalidArgumentError(f"broker name {name!r} is given twice")
        if not Path(path).is_dir():
            raise InvalidArgumentError(f"store of {name}: {path} is not a directory")
        directory = commitlog_dir(path).resolve()
        if directory == Path(path).resolve() and not list_segments(directory):
            raise InvalidArgumentError(
                f"store of {name}: {path} holds neither commitlog/ nor commitlog segments")
        if directory in seen:
            raise InvalidArgumentError(
                f"stores of {seen[directory]} and {name} are the same commitlog {directory}")
        seen[directory] = name
        stores.append(StoreRef(name, Path(path)))
    return stores


def as_stores(stores: str | Path | list[StoreRef]) -> list[StoreRef]:
    """A job's stores: a list as it is, one path as one unnamed store."""
    return stores if isinstance(stores, list) else [StoreRef(None, Path(stores))]


def named(stores: list[StoreRef]) -> bool:
    """Whether the job's rows carry a broker (every store is named, or none is)."""
    return stores[0].broker is not None
