"""Writer settings, from flags (see ``__main__``); validated on construction."""

import argparse
from dataclasses import dataclass
from pathlib import Path

from rmqstore import delay
from rmqstore.formats import ha
from rmqstore.formats.commitlog import DEFAULT_MAX_MESSAGE_SIZE
from rmqstore.formats.hosts import Host, parse_host

DEFAULT_SEGMENT_SIZE = 1024 * 1024 * 1024
ASYNC_MASTER, SYNC_MASTER, SLAVE = "async_master", "sync_master", "slave"
ROLES = (ASYNC_MASTER, SYNC_MASTER, SLAVE)  # RocketMQ's brokerRole
HA_PORT_SLOT = 6  # ``rmqstore serve``: the HA port is the port base + 6


@dataclass(frozen=True)
class WriterConfig:
    store: Path
    segment_size: int = DEFAULT_SEGMENT_SIZE
    flush: str = "async"  # async: periodic; sync: a put returns once durable (group commit)
    flush_interval_ms: int = 500
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    queues_per_topic: int = 8
    store_host: str = "127.0.0.1:10911"
    cluster_name: str = "DefaultCluster"
    warmup: bool = False
    preallocate: bool = True
    snapshot_interval_ms: int = 10_000  # checkpoint file and queue-offset snapshot
    dispatch_linger_ms: float = 5.0  # a subscriber near the head waits this long for more
    delay_levels: str = delay.DEFAULT_LEVELS  # RocketMQ's messageDelayLevel
    delivery: bool = True  # run the delivery service (delayed messages)
    retention_hours: float = 72.0  # RocketMQ's fileReservedTime
    delete_when: str = "4"  # hour of day (0-23) of the daily deletion pass, or "always"
    disk_max_used_ratio: float = 75.0  # percent: above it, expired segments go at once
    disk_forced_ratio: float = 85.0  # percent: above it, the oldest segments go expired or not
    retention_interval_s: float = 10.0  # RocketMQ's cleanResourceInterval
    role: str = "async_master"  # RocketMQ's brokerRole (see ROLES)
    ha_port: int = 0  # a master's slaves connect here (0: no HA listener)
    slave_timeout_s: float = 3.0  # sync_master: FLUSH_SLAVE_TIMEOUT after this long
    slave_fallbehind_max: int = 256 << 20  # sync_master: SLAVE_NOT_AVAILABLE this far behind
    min_sync_replicas: int = 0  # refuse puts while fewer slaves are in sync (0: off)
    ha_master: str = ""  # a slave's master, HOST:PORT of its HA port
    ha_retry_s: float = ha.SLAVE_RETRY_S  # a slave reconnects after this long
    ha_idle_s: float = ha.IDLE_TIMEOUT_S  # either end drops a peer silent for this long

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"--role must be one of {', '.join(ROLES)}, not {self.role!r}")
        if self.role == "slave":
            if not self.ha_master:
                raise ValueError("--role slave needs --ha-master HOST:PORT (the master's HA port)")
            master_address(self.ha_master)
        elif self.ha_master:
            raise ValueError(f"--ha-master is for --role slave, not {self.role}")
        if not self.ha_retry_s > 0 or not self.ha_idle_s > 0:
            raise ValueError("--ha-retry-seconds and --ha-idle-seconds must be positive")
        if self.flush not in ("async", "sync"):
            raise ValueError(f"--flush must be async or sync, not {self.flush!r}")
        if self.segment_size < 4096 or self.segment_size % 4096:
            raise ValueError("--commitlog-segment-size must be a multiple of 4096")
        if not 0 <= self.dispatch_linger_ms <= 1000:
            raise ValueError("--dispatch-linger-ms must be in 0..1000")
        if self.snapshot_interval_ms <= 0:
            raise ValueError("the snapshot interval must be positive")
        if self.max_message_size <= 0:
            raise ValueError("--max-message-size must be positive")
        if not 1 <= self.queues_per_topic <= 65536:
            raise ValueError("--queues-per-topic must be in 1..65536")
        parse_host(self.store_host)
        delay.parse_levels(self.delay_levels)
        if not self.retention_hours >= 0:
            raise ValueError("--retention-hours must be 0 or more")
        if self.delete_when != "always" and not (
            self.delete_when.isdigit() and 0 <= int(self.delete_when) <= 23
        ):
            raise ValueError(f"--delete-when must be an hour 0..23 or 'always', not "
                             f"{self.delete_when!r}")  # fmt: skip
        if not 0 < self.disk_max_used_ratio <= 100 or not 0 < self.disk_forced_ratio <= 100:
            raise ValueError("--disk-max-used-ratio must be in (0, 100]")
        if self.retention_interval_s <= 0:
            raise ValueError("the retention interval must be positive")
        if not 0 <= self.ha_port <= 65535:
            raise ValueError("--ha-port must be in 0..65535")
        if not self.slave_timeout_s > 0:
            raise ValueError("--slave-timeout must be positive")
        if self.slave_fallbehind_max <= 0:
            raise ValueError("--slave-fallbehind-max must be positive")
        if self.min_sync_replicas < 0:
            raise ValueError("--min-sync-replicas must be 0 or more")

    @property
    def host(self) -> Host:
        return parse_host(self.store_host)

    @property
    def is_slave(self) -> bool:
        return self.role == "slave"


def master_address(text: str) -> tuple[str, int]:
    """(host, port) of ``HOST:PORT`` or ``[IPv6]:PORT``; the host may be a name."""
    host, _, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--ha-master must be HOST:PORT, not {text!r}")
    return host, int(port)


def add_background_flags(p: argparse.ArgumentParser) -> None:
    """Delayed delivery and retention (the writer runs both)."""
    p.add_argument(
        "--delay-levels",
        default=WriterConfig.delay_levels,
        help="delay of each level, RocketMQ's messageDelayLevel (default: %(default)s)",
    )
    p.add_argument(
        "--no-delivery", dest="delivery", action="store_false",
        help="do not deliver delayed messages (they stay in the schedule topic)",
    )  # fmt: skip
    p.add_argument(
        "--retention-hours", type=float, default=WriterConfig.retention_hours,
        help="keep commitlog segments at least this long (fractions allowed; "
        "default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--delete-when", default=WriterConfig.delete_when,
        help="hour of day (0-23, local time) when expired segments are deleted, or 'always' "
        "(default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--disk-max-used-ratio", type=float, default=WriterConfig.disk_max_used_ratio,
        help="percent of the disk in use above which expired segments are deleted at any "
        f"hour; above {WriterConfig.disk_forced_ratio:g} the oldest go even unexpired "
        "(default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--retention-check-seconds", type=float, default=WriterConfig.retention_interval_s,
        help="how often retention looks for segments to delete (default: %(default)s)",
    )  # fmt: skip



def background_args(args: argparse.Namespace) -> list[str]:
    """The flags of ``add_background_flags`` as parsed, as the writer's command line."""
    out = [
        "--delay-levels", args.delay_levels, "--retention-hours", str(args.retention_hours),
        "--delete-when", args.delete_when, "--disk-max-used-ratio", str(args.disk_max_used_ratio),
        "--retention-check-seconds", str(args.retention_check_seconds),
    ]  # fmt: skip
    return out if args.delivery else [*out, "--no-delivery"]


def add_replication_flags(p: argparse.ArgumentParser, ha_port_help: str = "") -> None:
    """RocketMQ's master/slave replication (its HA protocol; ``docs/replication.md``)."""
    p.add_argument(
        "--role", choices=ROLES, default=WriterConfig.role,
        help="async_master: puts answered once stored; sync_master: also once a slave holds "
        "them (else FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE); slave: follows --ha-master and "
        "refuses puts (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--ha-port", type=int, default=None,
        help=ha_port_help or "take slaves (RocketMQ's HA protocol) on this port, on the host "
        "of --listen (default: none)",
    )  # fmt: skip
    p.add_argument(
        "--slave-timeout", type=float, default=WriterConfig.slave_timeout_s,
        help="sync_master: seconds a put waits for a slave before FLUSH_SLAVE_TIMEOUT "
        "(default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--slave-fallbehind-max", type=int, default=WriterConfig.slave_fallbehind_max,
        help="sync_master: bytes behind at which a slave does not count (SLAVE_NOT_AVAILABLE; "
        "default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--min-sync-replicas", type=int, default=WriterConfig.min_sync_replicas,
        help="refuse puts (UNAVAILABLE, nothing written) while fewer slaves than this are "
        "connected and less than --slave-fallbehind-max behind (default: 0, off)",
    )  # fmt: skip
    p.add_argument(
        "--ha-master", default="", metavar="HOST:PORT",
        help="a slave's master: its HA port (RocketMQ's broker: listen port + 1, 10912)",
    )  # fmt: skip
    p.add_argument(
        "--ha-master-commitlog", default="", metavar="HOST:PORT",
        help="a slave's master is an rmqstore writer at this gRPC address: before following, "
        "the slave cuts its log where its history parts from the master's (a former master "
        "rejoining after a switchover; the cut bytes go to rmqstore/quarantine/)",
    )  # fmt: skip
    p.add_argument(
        "--config-copy-seconds", type=float, default=10.0,
        help="with --ha-master-commitlog: copy the master's config/ (topics, delay offsets, "
        "consumer offsets, subscription groups, broker permission) this often "
        "(default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--ha-peers", default="", metavar="HOST:PORT,...",
        help="a master's peers: the writer gRPC addresses of the other members of its broker "
        "group; at start, one of them that is a master of a later master term makes this "
        "writer start as its slave instead (peers that do not answer are skipped)",
    )  # fmt: skip
    p.add_argument(
        "--demote", action="store_true",
        help="with --role slave: start as a slave although a promotion made this store a "
        "master (it restarts as that master otherwise; the record is forgotten)",
    )  # fmt: skip
    p.add_argument(
        "--ha-retry-seconds", type=float, default=WriterConfig.ha_retry_s,
        help="a slave reconnects to its master after this long (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--ha-idle-seconds", type=float, default=WriterConfig.ha_idle_s,
        help="a slave drops a master it heard nothing from for this long and reconnects; "
        "a master drops such a slave (RocketMQ's haHousekeepingInterval; default: %(default)s)",
    )  # fmt: skip


def replication_args(args: argparse.Namespace, ha_port: int) -> list[str]:
    """The flags of ``add_replication_flags`` as parsed, as the writer's command line."""
    out = [
        "--role", args.role, "--ha-port", str(ha_port),
        "--slave-timeout", str(args.slave_timeout),
        "--slave-fallbehind-max", str(args.slave_fallbehind_max),
        "--min-sync-replicas", str(args.min_sync_replicas),
        "--ha-retry-seconds", str(args.ha_retry_seconds),
        "--ha-idle-seconds", str(args.ha_idle_seconds),
        "--config-copy-seconds", str(args.config_copy_seconds),
    ]  # fmt: skip
    out += ["--ha-master", args.ha_master] if args.ha_master else []
    out += ["--demote"] if args.demote else []
    out += ["--ha-peers", args.ha_peers] if args.ha_peers else []
    return out + (["--ha-master-commitlog", args.ha_master_commitlog]
                  if args.ha_master_commitlog else [])  # fmt: skip
