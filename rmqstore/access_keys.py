"""Access keys as RocketMQ 5 clients use them: the signed headers, and where a secret comes
from (a file or the environment, never the command line, where ``ps`` shows it to every
user).

A signed call carries ``x-mq-date-time`` (``yyyyMMdd'T'HHmmss'Z'``) and ``authorization:
MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time, Signature=<hex
HMAC-SHA1(secret key, the date)>``. The proxy checks it (``services.proxy.auth``); the
``rmqstore`` commands and the console sign their calls to the proxy with :func:`metadata`.
"""

import argparse
import datetime as dt
import hashlib
import hmac
import os
import time
from pathlib import Path

SCHEME = "MQv2-HMAC-SHA1"
DATE_HEADER = "x-mq-date-time"
DATE_FORMAT = "%Y%m%dT%H%M%SZ"
ACCESS_KEY_ENV = "RMQSTORE_ACCESS_KEY"
SECRET_KEY_ENV = "RMQSTORE_SECRET_KEY"
MAX_SECRET_BYTES = 4096


def format_date(now: float) -> str:
    """``now`` (epoch seconds) as the signed date, in UTC."""
    return dt.datetime.fromtimestamp(now, tz=dt.UTC).strftime(DATE_FORMAT)


def parse_date(text: str) -> float:
    """The signed date as epoch seconds (read as UTC); ValueError if it is not one."""
    return dt.datetime.strptime(text, DATE_FORMAT).replace(tzinfo=dt.UTC).timestamp()


def signature(secret_key: str, date: str) -> str:
    return hmac.new(secret_key.encode(), date.encode(), hashlib.sha1).hexdigest()


def sign(access_key: str, secret_key: str, date: str) -> str:
    """The ``authorization`` header value of a call signed at ``date``."""
    return (f"{SCHEME} Credential={access_key}, SignedHeaders={DATE_HEADER}, "
            f"Signature={signature(secret_key, date)}")  # fmt: skip


def metadata(access_key: str, secret_key: str, now: float | None = None
             ) -> tuple[tuple[str, str], ...]:  # fmt: skip
    """The headers of a call signed now (none without an access key)."""
    if not access_key:
        return ()
    date = format_date(time.time() if now is None else now)
    return ((DATE_HEADER, date), ("authorization", sign(access_key, secret_key, date)))


def read_secret(path: str, env: str = SECRET_KEY_ENV) -> str:
    """The secret in the file ``path`` (one line; its end of line is not part of it), else
    in the environment variable ``env`` ("" if neither). ValueError if the file cannot be
    read or is empty."""
    if not path:
        return os.environ.get(env, "")
    try:
        with Path(path).open("rb") as f:
            raw = f.read(MAX_SECRET_BYTES + 1)
    except OSError as e:
        raise ValueError(f"secret key file {path}: {e.strerror}") from None
    if len(raw) > MAX_SECRET_BYTES:
        raise ValueError(f"secret key file {path} is longer than {MAX_SECRET_BYTES} bytes")
    text = raw.decode("utf-8", errors="strict").rstrip("\r\n")
    if not text:
        raise ValueError(f"secret key file {path} is empty")
    return text


class _Refused(argparse.Action):
    """``--secret-key VALUE``: refused, with where a secret goes instead."""

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[no-untyped-def]
        parser.error(f"{option_string} is no longer taken (the command line is visible to "
                     f"every user in ps): put the secret in a file given to --secret-key-file, "
                     f"or in the environment variable {SECRET_KEY_ENV}")  # fmt: skip


def add_secret_flags(p: argparse.ArgumentParser | argparse._ArgumentGroup, what: str,
                     access_env: bool = True) -> None:  # fmt: skip
    """``--access-key`` and ``--secret-key-file`` (``what``: what they are for; the access
    key defaults to the environment's when ``access_env``)."""
    default = f" (default: ${ACCESS_KEY_ENV})" if access_env else ""
    p.add_argument("--access-key", default=None, help=f"access key {what}{default}")
    p.add_argument("--secret-key-file", default="", metavar="PATH",
                   help=f"file holding the secret key (default: ${SECRET_KEY_ENV})")
    p.add_argument("--secret-key", action=_Refused, help=argparse.SUPPRESS)


def client_keys(args: argparse.Namespace, access_env: bool = True) -> tuple[str, str]:
    """A client's (access key, secret key) from its flags and the environment (the access
    key only when ``access_env``): ("", "") when no access key is given. ValueError when an
    access key has no secret."""
    access_key = args.access_key or (os.environ.get(ACCESS_KEY_ENV, "") if access_env else "")
    if not access_key:
        return "", ""
    secret = read_secret(args.secret_key_file)
    if not secret:
        raise ValueError(f"access key {access_key} given without a secret key: give "
                         f"--secret-key-file or set {SECRET_KEY_ENV}")  # fmt: skip
    return access_key, secret
