"""Signed requests on the remoting broker's port (``--acl``): RocketMQ 4.x's ACL signature
(``rmqstore.formats.remoting_acl``), checked against the store's access key, as the proxy
checks RocketMQ 5 clients'. Each request is checked before it is handled; one that fails is
answered SYSTEM_ERROR (as RocketMQ's broker answers an ACL failure) with a remark naming what
failed, and nothing of it is done.

One difference with RocketMQ 4.9: its broker leaves ``_UNIQUE_KEY_QUERY`` out of the signed
content, which clients from 4.9.3 on sign and older ones do not, so a ``QUERY_MESSAGE`` by
unique key failed there with one or the other (RocketMQ issues 5310, 7085). Both are taken.

Only authentication: a request signed with the access key may do anything a 4.x client or
mqadmin can (RocketMQ's per-topic and per-group permissions of ``plain_acl.yml`` are not
read); there is one access key, the one the proxy checks.
"""

import hmac
import logging
import time
from collections.abc import Awaitable, Callable

from rmqstore.formats import remoting as R
from rmqstore.formats.remoting_acl import ACCESS_KEY, SIGNATURE, content, signature
from rmqstore.remoting_net import Connection, Handler, Later

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # signed by some clients, not by others (above)
LOG_EVERY_S = 60.0  # refusals are logged at most this often (each is counted)
Answer = R.Command | None
log = logging.getLogger("rmqstore.remoting")


class Signed:
    """Passes to ``handle`` the requests signed with ``access_key``'s ``secret_key``; answers
    the others SYSTEM_ERROR, counts each (``refused(reason)``) and logs one of them a minute."""

    def __init__(self, handle: Handler, access_key: str, secret_key: str,
                 refused: Callable[[str], None] | None = None) -> None:  # fmt: skip
        self.handle = handle
        self.access_key = access_key
        self._secret = secret_key
        self._refused = refused
        self._logged_at = -LOG_EVERY_S  # monotonic time of the last refusal logged
        self._unlogged = 0  # refusals since

    def __call__(self, conn: Connection, req: R.Command) -> Answer | Awaitable[Answer] | Later:
        problem = self.problem(req)
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

    def problem(self, req: R.Command) -> tuple[str, str] | None:
        """Why ``req`` is refused (a reason for metrics, and a remark), or None when it is
        signed with the access key."""
        ext = req.ext or {}
        key = ext.get(ACCESS_KEY)
        if not key:
            return ("no_access_key",
                    "the request carries no AccessKey: this broker takes only signed requests "
                    "(set the client's access key and secret key)")  # fmt: skip
        if not hmac.compare_digest(key.encode(), self.access_key.encode()):
            return "unknown_access_key", f"access key {key} is not known here"
        given = ext.get(SIGNATURE)
        if not given:
            return "no_signature", f"the request of access key {key} carries no Signature"
        forms = [""] if UNIQUE_KEY_QUERY not in ext else ["", UNIQUE_KEY_QUERY]
        for leave_out in forms:
            expected = signature(self._secret, content(ext, req.body, leave_out))
            if hmac.compare_digest(given.encode(), expected.encode()):
                return None
        return "bad_signature", f"the signature does not match the secret key of access key {key}"
