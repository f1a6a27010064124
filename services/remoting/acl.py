"""Signed requests and permissions on the remoting broker's port (``--acl``, ``--acl-file``):
RocketMQ 4.x's ACL. Each request is checked before it is handled; one that fails is answered
SYSTEM_ERROR (as RocketMQ's broker answers an ACL failure) with a remark naming what failed,
and nothing of it is done.

The accounts: with ``--acl``, one, the store's access key (the one the proxy checks), which
may do anything; with ``--acl-file``, those of a RocketMQ ``plain_acl.yml``
(``rmqstore.formats.plain_acl``), plus the store's access key as an admin when one is given
(rmqstore's own tools sign with it). The file is read again when it changes (looked at at
most every ``RELOAD_CHECK_S``); a version that does not parse is logged and the one before
kept. In the order RocketMQ 4.9 checks:

1. a client whose address matches ``globalWhiteRemoteAddresses`` passes;
2. the request must carry an ``AccessKey`` of an account;
3. a client whose address matches that account's ``whiteRemoteAddress`` passes;
4. the ``Signature`` must be the request's, with the account's secret
   (``rmqstore.formats.remoting_acl``);
5. unless the account is an admin, the admin commands (updateTopic, deleteTopic,
   updateBrokerConfig, updateSubGroup, deleteSubGroup) are refused, and each topic or group
   the request touches needs its permission (``RESOURCES``): a send PUB on its topic; a pull,
   offset query or commit SUB on its topic and its group; a heartbeat SUB on each
   subscribed topic and group; a message given back PUB on its topic and SUB on its group; a
   query by key SUB on its topic.

One difference with RocketMQ 4.9: its broker leaves ``_UNIQUE_KEY_QUERY`` out of the signed
content, which clients from 4.9.3 on sign and older ones do not, so a ``QUERY_MESSAGE`` by
unique key failed there with one or the other (RocketMQ issues 5310, 7085). Both are taken.
"""

import hmac
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from rmqstore.formats import remoting as R
from rmqstore.formats.plain_acl import PUB, RETRY_PREFIX, SUB, Account, AclConfig, AclFileError
from rmqstore.formats.plain_acl import parse as parse_acl
from rmqstore.formats.remoting_acl import ACCESS_KEY, SIGNATURE, content, signature
from rmqstore.remoting_net import Connection, Handler, Later

C = R.RequestCode
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # signed by some clients, not by others (above)
LOG_EVERY_S = 60.0  # refusals are logged at most this often (each is counted)
RELOAD_CHECK_S = 5.0
ADMIN_CODES = frozenset({C.UPDATE_AND_CREATE_TOPIC, C.UPDATE_BROKER_CONFIG,
                         C.DELETE_TOPIC_IN_BROKER, C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                         C.DELETE_SUBSCRIPTIONGROUP})  # fmt: skip
Answer = R.Command | None
Problem = tuple[str, str]  # (reason for the metric, remark)
log = logging.getLogger("rmqstore.remoting")


def _group(name: str | None) -> str:
    """A group's resource, "" (nothing to check) when the request names none (a producer's
    UNREGISTER_CLIENT)."""
    return RETRY_PREFIX + name if name else ""


def _heartbeat(req: R.Command) -> Iterator[tuple[str, int]]:
    try:
        body = json.loads(req.body or b"{}")
    except ValueError:
        return
    for consumer in body.get("consumerDataSet") or () if isinstance(body, dict) else ():
        if not isinstance(consumer, dict):
            continue
        yield _group(consumer.get("groupName")), SUB
        for sub in consumer.get("subscriptionDataSet") or ():
            if isinstance(sub, dict):
                yield str(sub.get("topic") or ""), SUB


# what each request code touches: (resource, permission needed), from its fields
RESOURCES: dict[int, Callable[[R.Command], Iterator[tuple[str, int]]]] = {
    C.SEND_MESSAGE: lambda r: iter([(r.field("topic") or "", PUB)]),
    C.SEND_MESSAGE_V2: lambda r: iter([(r.field("b") or "", PUB)]),
    C.SEND_BATCH_MESSAGE: lambda r: iter([(r.field("b") or "", PUB)]),
    C.CONSUMER_SEND_MSG_BACK: lambda r: iter([(r.field("originTopic") or "", PUB),
                                              (_group(r.field("group")), SUB)]),
    C.PULL_MESSAGE: lambda r: iter([(r.field("topic") or "", SUB),
                                    (_group(r.field("consumerGroup")), SUB)]),
    C.QUERY_MESSAGE: lambda r: iter([(r.field("topic") or "", SUB)]),
    C.HEART_BEAT: _heartbeat,
    C.UNREGISTER_CLIENT: lambda r: iter([(_group(r.field("consumerGroup")), SUB)]),
    C.GET_CONSUMER_LIST_BY_GROUP: lambda r: iter([(_group(r.field("consumerGroup")), SUB)]),
    C.QUERY_CONSUMER_OFFSET: lambda r: iter([(_group(r.field("consumerGroup")), SUB),
                                             (r.field("topic") or "", SUB)]),
    C.UPDATE_CONSUMER_OFFSET: lambda r: iter([(_group(r.field("consumerGroup")), SUB),
                                              (r.field("topic") or "", SUB)]),
}  # fmt: skip


class Accounts:
    """Who may sign, and what each may do: the store's key alone, or an ACL file's accounts
    (and the store's key as an admin), the file read again when it changes."""

    def __init__(self, store_key: tuple[str, str] = ("", ""), path: Path | None = None) -> None:
        self.store_key = store_key
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._checked_at = time.monotonic()
        self.config = self._with_store_key(AclConfig())
        if path is not None:
            self._stamp = self._stat()  # before the read: a change meanwhile is read again
            self.config = self._with_store_key(parse_acl(path.read_text()))  # AclFileError

    def _with_store_key(self, config: AclConfig) -> AclConfig:
        key, secret = self.store_key
        if not key:
            return config
        return AclConfig(config.global_white,
                         {**config.accounts, key: Account(key, secret, admin=True)})  # fmt: skip

    def _stat(self) -> tuple[int, int, int] | None:
        """The file's (inode, mtime, size): a Secret's update swaps in another file."""
        assert self.path is not None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def current(self) -> AclConfig:
        """The accounts, the file looked at again when ``RELOAD_CHECK_S`` have passed."""
        if self.path is not None and time.monotonic() - self._checked_at >= RELOAD_CHECK_S:
            self.reload()
        return self.config

    def reload(self) -> None:
        assert self.path is not None
        self._checked_at = time.monotonic()
        stamp = self._stat()
        if stamp is None or stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self.config = self._with_store_key(parse_acl(self.path.read_text()))
        except (OSError, AclFileError) as e:
            log.error("ACL file %s not applied, the accounts before kept: %s", self.path, e)
            return
        log.info("ACL file %s applied: %d accounts", self.path, len(self.config.accounts))


class Signed:
    """Passes to ``handle`` the requests ``accounts`` allow; answers the others SYSTEM_ERROR,
    counts each (``refused(reason)``) and logs one of them a minute."""

    def __init__(self, handle: Handler, accounts: Accounts,
                 refused: Callable[[str], None] | None = None) -> None:  # fmt: skip
        self.handle = handle
        self.accounts = accounts
        self._refused = refused
        self._logged_at = -LOG_EVERY_S  # monotonic time of the last refusal logged
        self._unlogged = 0  # refusals since

    def __call__(self, conn: Connection, req: R.Command) -> Answer | Awaitable[Answer] | Later:
        problem = self.problem(req, conn.remote)
        if problem is None:
            return self.handle(conn, req)
        reason, text = problem
        if self._refused is not None:
            self._refused(reason)
        self._log(conn, req, text)
        return R.response_to(req, R.ResponseCode.SYSTEM_ERROR, remark=f"ACL: {text}")

    def _log(self, conn: Connection, req: R.Command, text: str) -> None:
        now = time.monotonic()
        if now - self._logged_at < LOG_EVERY_S:
            self._unlogged += 1
            return
        log.warning("refused %s from %s: %s (%d more refused since the last of these lines)",
                    R.code_name(req.code), conn.remote, text, self._unlogged)  # fmt: skip
        self._logged_at, self._unlogged = now, 0

    def problem(self, req: R.Command, remote: str = "") -> Problem | None:
        """Why ``req`` from ``remote`` (``host:port``) is refused (a reason for metrics, and a
        remark), or None when it may be handled."""
        config = self.accounts.current()
        ip = _host(remote)
        if any(rule.matches(ip) for rule in config.global_white):
            return None
        ext = req.ext or {}
        key = ext.get(ACCESS_KEY)
        if not key:
            return ("no_access_key",
                    "the request carries no AccessKey: this broker takes only signed requests "
                    "(set the client's access key and secret key)")  # fmt: skip
        account = config.accounts.get(key)
        if account is None:
            return "unknown_access_key", f"access key {key} is not known here"
        if account.white is not None and account.white.matches(ip):
            return None
        bad = _signature_problem(req, ext, key, account.secret_key)
        if bad is not None or account.admin:
            return bad
        return _permission_problem(req, account)


def _host(remote: str) -> str:
    host = remote.rpartition(":")[0] if ":" in remote else remote
    return host.strip("[]")


def _signature_problem(req: R.Command, ext: dict[str, str], key: str, secret: str
                       ) -> Problem | None:  # fmt: skip
    given = ext.get(SIGNATURE)
    if not given:
        return "no_signature", f"the request of access key {key} carries no Signature"
    forms = [""] if UNIQUE_KEY_QUERY not in ext else ["", UNIQUE_KEY_QUERY]
    for leave_out in forms:
        expected = signature(secret, content(ext, req.body, leave_out))
        if hmac.compare_digest(given.encode(), expected.encode()):
            return None
    return "bad_signature", f"the signature does not match the secret key of access key {key}"


def _permission_problem(req: R.Command, account: Account) -> Problem | None:
    if req.code in ADMIN_CODES:
        return ("no_permission", f"{R.code_name(req.code)} needs an admin account; access key "
                f"{account.access_key} is not one")  # fmt: skip
    resources = RESOURCES.get(req.code)
    if resources is None:
        return None
    for resource, needed in resources(req):
        if resource and not account.perm(resource) & needed:
            what = f"group {resource[len(RETRY_PREFIX):]}" \
                if resource.startswith(RETRY_PREFIX) else f"topic {resource}"  # fmt: skip
            return ("no_permission", f"access key {account.access_key} may not "
                    f"{'send to' if needed == PUB else 'subscribe to'} {what}")  # fmt: skip
    return None
