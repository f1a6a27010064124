"""Proxy settings, from flags (see ``__main__``; ``rmqstore serve`` forwards the same
flags); validated on construction."""

import argparse
from dataclasses import dataclass

from rmqstore import access_keys
from rmqstore.delay import parse_levels
from rmqstore.errors import InvalidArgumentError


@dataclass(frozen=True)
class ProxyConfig:
    writer: str = "127.0.0.1:8100"  # the commitlog writer (appends, reads, topics)
    # the address clients are told to dial (QueryRoute's broker endpoints); empty: the
    # address the proxy listens on
    advertise: str = ""
    broker_name: str = "rmqstore"
    auto_create_topics: bool = True  # RocketMQ's autoCreateTopicEnable
    max_body_size: int = 4 * 1024 * 1024
    # how far ahead a delivery time may be (RocketMQ 5's timerMaxDelaySec: 3 days); beyond the
    # largest delay level (2 h) the writer parks a message again level by level until its time
    max_delay_ms: int = 3 * 86_400_000
    transaction_timeout_s: float = 6.0  # first check of an open transaction
    transaction_check_interval_s: float = 60.0  # then, doubling each time up to 8x
    transaction_check_max: int = 15  # checks before an open transaction is rolled back
    checker_period_s: float = 0.5  # how often open transactions are looked at
    batch_max: int = 1024  # messages per writer batch
    batches_in_flight: int = 2
    # under load, writer batches start at most this often (see appender)
    batch_spacing_s: float = 0.001
    # while a pipelining sender's sends keep arriving, its batch waits up to this long
    batch_linger_s: float = 0.016
    access_key: str = ""  # with secret_key: every call must carry a valid signature
    secret_key: str = ""  # from --secret-key-file or $RMQSTORE_SECRET_KEY, never a flag
    # a signed date farther than this from the proxy's clock is refused (replays, stale)
    signature_window_s: float = 900.0
    consume_from: str = "first"  # where a new consumer group starts: first or last message
    group_retry_max_times: int = 16  # retries of a new group (RocketMQ's retryMaxTimes)
    fifo_groups: tuple[str, ...] = ()  # new groups created FIFO

    def __post_init__(self) -> None:
        if self.max_body_size <= 0:
            raise ValueError("--max-body-size must be positive")
        if self.max_delay_ms <= 0:
            raise ValueError("--max-delay must be positive")
        if self.transaction_timeout_s <= 0 or self.transaction_check_interval_s <= 0:
            raise ValueError("transaction timeout and check interval must be positive")
        if self.transaction_check_max < 1:
            raise ValueError("--transaction-check-max must be at least 1")
        if bool(self.access_key) != bool(self.secret_key):
            raise ValueError("--access-key needs a secret key: give --secret-key-file or set "
                             f"{access_keys.SECRET_KEY_ENV}")
        if not 0 < self.signature_window_s <= 86_400:
            raise ValueError("--signature-window must be between 0 and 86400 seconds")
        if self.consume_from not in ("first", "last"):
            raise ValueError("--consume-from must be first or last")
        if not 0 <= self.group_retry_max_times <= 1000:
            raise ValueError("--group-retry-max-times must be between 0 and 1000")
        if not 1 <= self.batch_max <= 10_000:
            raise ValueError("the batch size must be between 1 and 10,000 messages")
        if self.batches_in_flight < 1:
            raise ValueError("--batches-in-flight must be at least 1")
        if not 0 <= self.batch_spacing_s <= 1:
            raise ValueError("--batch-spacing-ms must be between 0 and 1000")
        if not 0 <= self.batch_linger_s <= 1:
            raise ValueError("--batch-linger-ms must be between 0 and 1000")

    def check_delay_s(self, checks_done: int) -> float:
        """Wait before the next check, after ``checks_done`` checks (>= 1): back-off."""
        return self.transaction_check_interval_s * min(2 ** (checks_done - 1), 8)


D = ProxyConfig()


def duration_ms(text: str) -> int:
    """``90m``, ``12h``, ``3d`` (a delay level's syntax) in ms."""
    try:
        (ms,) = parse_levels(text.strip())
    except (InvalidArgumentError, ValueError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not one duration such as 90m, 12h or 3d") from None
    return ms


def add_flags(p: argparse.ArgumentParser) -> None:
    """The proxy's own flags (``python -m services.proxy`` and ``rmqstore serve``)."""
    p.add_argument(
        "--advertise", default="", help="host:port clients dial (default: where the proxy listens)"
    )
    p.add_argument("--broker-name", default=D.broker_name)
    p.add_argument(
        "--no-auto-create-topics",
        dest="auto_create_topics",
        action="store_false",
        help="refuse unknown topics (TOPIC_NOT_FOUND) instead of creating them",
    )
    p.add_argument("--max-body-size", type=int, default=D.max_body_size)
    p.add_argument(
        "--max-delay", type=duration_ms, default=D.max_delay_ms, dest="max_delay_ms",
        metavar="TIME",
        help="farthest delivery time a delayed message may ask for, as 90m, 12h or 3d "
        "(default: 3d, as RocketMQ 5); farther is ILLEGAL_DELIVERY_TIME",
    )  # fmt: skip
    p.add_argument(
        "--transaction-timeout",
        type=float,
        default=D.transaction_timeout_s,
        help="seconds before an open transaction is first checked (default: %(default)s)",
    )
    p.add_argument(
        "--transaction-check-interval",
        type=float,
        default=D.transaction_check_interval_s,
        help="seconds between checks, doubling up to 8x (default: %(default)s)",
    )
    p.add_argument(
        "--transaction-check-max",
        type=int,
        default=D.transaction_check_max,
        help="checks before an unresolved transaction is rolled back (default: %(default)s)",
    )
    access_keys.add_secret_flags(
        p, "every call must be signed with (with its secret key)", access_env=False
    )
    p.add_argument(
        "--signature-window", type=float, default=D.signature_window_s, metavar="SECONDS",
        help="a signed call whose x-mq-date-time is farther than this from the proxy's clock "
        "is refused, as a replay or a stale signature (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--consume-from", choices=("first", "last"), default=D.consume_from,
        help="where a consumer group new to a queue starts (default: %(default)s message)",
    )  # fmt: skip
    p.add_argument(
        "--group-retry-max-times", type=int, default=D.group_retry_max_times,
        help="retries of a group created on first use: retries + 1 deliveries, then the "
        "group's dead-letter topic (default: %(default)s; per group: subscriptionGroup.json)",
    )  # fmt: skip
    p.add_argument(
        "--fifo-group", action="append", default=[], dest="fifo_groups",
        help="a group created on first use is FIFO (repeatable; per group: "
        "consumeMessageOrderly in subscriptionGroup.json)",
    )  # fmt: skip


def forward(args: argparse.Namespace) -> list[str]:
    """``add_flags``' values as command-line arguments again (for ``rmqstore serve``)."""
    out = [
        "--broker-name", args.broker_name,
        "--max-body-size", str(args.max_body_size),
        "--max-delay", f"{args.max_delay_ms // 1000}s",
        "--transaction-timeout", str(args.transaction_timeout),
        "--transaction-check-interval", str(args.transaction_check_interval),
        "--transaction-check-max", str(args.transaction_check_max),
    ]  # fmt: skip
    out += ["--consume-from", args.consume_from,
            "--group-retry-max-times", str(args.group_retry_max_times)]  # fmt: skip
    for g in args.fifo_groups:
        out += ["--fifo-group", g]
    if args.advertise:
        out += ["--advertise", args.advertise]
    if not args.auto_create_topics:
        out.append("--no-auto-create-topics")
    if args.access_key:  # the secret goes by file or environment, never on a command line
        out += ["--access-key", args.access_key,
                "--signature-window", str(args.signature_window)]  # fmt: skip
        if args.secret_key_file:
            out += ["--secret-key-file", args.secret_key_file]
    return out


def secret_key(args: argparse.Namespace) -> str:
    """The proxy's secret key (only with an access key): from ``--secret-key-file``, else
    ``$RMQSTORE_SECRET_KEY``. ValueError if the file cannot be read."""
    return access_keys.read_secret(args.secret_key_file) if args.access_key else ""
