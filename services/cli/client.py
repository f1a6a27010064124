"""What every client command shares: checked flag values, channels and gRPC failures as
:class:`CliError`.

Flag values are checked by argparse types against the protocol's ranges before any call
(a queue id is an int32, an offset an int64, a time one of ``rmqstore.times``' forms), so a
value the protocol cannot carry is a usage error (exit 2), never an overflow inside gRPC.
"""

import argparse
from collections.abc import Callable
from pathlib import Path

import grpc

from rmqstore import access_keys, times, tls
from rmqstore.server import MAX_MESSAGE_BYTES
from services.cli.errors import NOT_FOUND, UNAVAILABLE, USAGE, CliError

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# Where each API is served by ``rmqstore serve --port-base N`` (8100 by default).
API_PORTS = {
    "CommitLog": ("the writer", "--commitlog", "the port base"),
    "Query": ("the query service", "--query", "the port base + 1"),
}

# A status that says what happened to the request (exit 2 or 1) rather than that the server
# could not answer it (exit 3).
_STATUS_EXIT = {
    grpc.StatusCode.INVALID_ARGUMENT: USAGE,
    grpc.StatusCode.OUT_OF_RANGE: USAGE,
    grpc.StatusCode.FAILED_PRECONDITION: USAGE,
    grpc.StatusCode.PERMISSION_DENIED: USAGE,
    grpc.StatusCode.UNAUTHENTICATED: USAGE,
    grpc.StatusCode.ALREADY_EXISTS: USAGE,
    grpc.StatusCode.NOT_FOUND: NOT_FOUND,
}


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: an integer in ``lo..hi``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is outside {lo}..{hi}")
        return value

    parse.__name__ = "integer"
    return parse


def time_ms(text: str) -> int:
    """An argparse type: a time in any of ``rmqstore.times``' forms, as epoch ms."""
    try:
        return times.parse_time(text)
    except times.TimeFormatError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 86_400:
        raise argparse.ArgumentTypeError(f"{text} is outside (0, 86400] seconds")
    return value


def address(text: str) -> str:
    """An argparse type: ``host:port`` with a port in 1..65535 (gRPC would wrap 99999)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    if not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} of {text!r} is outside 1..65535")
    return text


def _check_pem(flag: str, path: str, kind: str) -> None:
    if path and f"-----BEGIN {kind}".encode() not in Path(path).read_bytes():
        raise CliError(f"{flag} {path}: holds no PEM {kind.lower()}", USAGE)


def channel(target: str, args: argparse.Namespace) -> grpc.Channel:
    """A channel to ``target`` with the command's TLS flags, checked before any call."""
    check_tls(args)
    return tls.client_channel(target, args)


def check_tls(args: argparse.Namespace) -> None:
    """The TLS flags name readable PEM files of the right kind, a certificate with its key."""
    try:
        tls.load(args)
    except ValueError as e:
        raise CliError(str(e), USAGE) from None
    _check_pem("--tls-ca", args.tls_ca, "CERTIFICATE")
    _check_pem("--tls-cert", args.tls_cert, "CERTIFICATE")
    if args.tls_key and b"PRIVATE KEY-----" not in Path(args.tls_key).read_bytes():
        raise CliError(f"--tls-key {args.tls_key}: holds no PEM private key", USAGE)


def signing_keys(args: argparse.Namespace) -> tuple[str, str]:
    """The access key and secret a command's calls are signed with, from ``--access-key`` /
    ``--secret-key-file`` or the environment (("", "") for none); an access key without its
    secret is a usage error."""
    try:
        return access_keys.client_keys(args)
    except ValueError as e:
        raise CliError(str(e), USAGE) from None


def rpc_error(e: grpc.RpcError, api: str, target: str, what: str = "") -> CliError:
    """One line for a failed call to ``api`` ("CommitLog" or "Query") at ``target``."""
    code = e.code() if callable(getattr(e, "code", None)) else grpc.StatusCode.UNKNOWN
    details = (e.details() if callable(getattr(e, "details", None)) else "") or ""
    prefix = f"{what}: " if what else ""
    service, flag, slot = API_PORTS[api]
    where = (f"give {flag} the address of {service} ({slot} of 'rmqstore serve', "
             f"{8100 + (slot != 'the port base')} by default)")  # fmt: skip
    if code == grpc.StatusCode.UNIMPLEMENTED and "Method not found" in details:
        return CliError(f"{prefix}{target} does not serve the {api} API: {where}", USAGE)
    if code == grpc.StatusCode.UNAVAILABLE and "Failed parsing HTTP/2" in details:
        return CliError(f"{prefix}{target} is not a gRPC server (it answers another protocol: "
                        f"a metrics or console port?): {where}", USAGE)  # fmt: skip
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "message larger than max" in details:
        return CliError(
            f"{prefix}a request or answer exceeds the {MAX_MESSAGE_BYTES // 2**20} MiB "
            f"gRPC message limit ({details})", USAGE)  # fmt: skip
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) and not what:
        prefix = f"{target}: "
    return CliError(f"{prefix}{code.name}: {details}", _STATUS_EXIT.get(code, UNAVAILABLE))


def format_time(ms: int) -> str:
    """A store time for people: ISO-8601 in local time with its offset (JSON keeps ms)."""
    try:
        return times.format_time(ms, tz=None)
    except (OverflowError, OSError, ValueError):
        return str(ms)
