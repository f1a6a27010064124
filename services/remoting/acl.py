"""Signed requests on the remoting broker's port (``--acl``): RocketMQ 4.x's ACL signature,
checked against the store's access key, as the proxy checks RocketMQ 5 clients'.

A 4.x client with credentials (Java ``AclClientRPCHook``, ali-ons' ``accessKeyId``, mqadmin
with ``conf/tools.yml``) adds two ext fields to every request: ``AccessKey`` and
``Signature``, the Base64 HMAC-SHA1, keyed with the secret, of::

    value of each ext field but Signature, in the order of the field names, back to back (UTF-8)
    + the body's bytes (none when there is no body)

So ``{"b": "2", "a": "1", "AccessKey": "ak"}`` with body ``xy`` signs ``ak12xy`` (upper-case
names sort first). Each request is checked before it is handled; one that fails is answered
SYSTEM_ERROR (as RocketMQ's broker answers an ACL failure) with a remark naming what failed,
and nothing of it is done. Names sort by code point, as Java's ``TreeMap`` sorts ASCII names.

One difference with RocketMQ 4.9: since 4.9.3 its broker leaves ``_UNIQUE_KEY_QUERY`` out of
the signed content while mqadmin of those versions signs it, and older clients do not; a
``QUERY_MESSAGE`` by unique key failed one way or the other. Both are taken here.

Only authentication: a request signed with the access key may do anything a 4.x client or
mqadmin can (RocketMQ's per-topic and per-group permissions of ``plain_acl.yml`` are not
read); there is one access key, the one the proxy checks.
"""

import base64
import hashlib
import hmac
from collections.abc import Awaitable

from rmqstore.formats import remoting as R
from rmqstore.remoting_net import Connection, Handler, Later

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # left out of the content by 4.9.3+ brokers (above)
Answer = R.Command | None


def content(ext: dict[str, str], body: bytes | None, leave_out: str = "") -> bytes:
    """What a request's signature covers (``leave_out``: one more field not covered)."""
    text = "".join(ext[k] for k in sorted(ext) if k != SIGNATURE and k != leave_out)
    return text.encode() + (body or b"")


def signature(secret_key: str, signed: bytes) -> str:
    return base64.b64encode(hmac.new(secret_key.encode(), signed, hashlib.sha1).digest()).decode()


class Signed:
    """Passes to ``handle`` the requests signed with ``access_key``'s ``secret_key``; answers
    the others SYSTEM_ERROR."""

    def __init__(self, handle: Handler, access_key: str, secret_key: str) -> None:
        self.handle = handle
        self.access_key = access_key
        self._secret = secret_key

    def __call__(self, conn: Connection, req: R.Command) -> Answer | Awaitable[Answer] | Later:
        problem = self.problem(req)
        if problem is None:
            return self.handle(conn, req)
        return R.response_to(req, R.ResponseCode.SYSTEM_ERROR, remark=f"ACL: {problem}")

    def problem(self, req: R.Command) -> str | None:
        """Why ``req`` is refused, or None when it is signed with the access key."""
        ext = req.ext or {}
        key = ext.get(ACCESS_KEY)
        if not key:
            return ("the request carries no AccessKey: this broker takes only signed requests "
                    "(set the client's access key and secret key)")  # fmt: skip
        if not hmac.compare_digest(key.encode(), self.access_key.encode()):
            return f"access key {key} is not known here"
        given = ext.get(SIGNATURE)
        if not given:
            return f"the request of access key {key} carries no Signature"
        forms = [""] if UNIQUE_KEY_QUERY not in ext else ["", UNIQUE_KEY_QUERY]
        for leave_out in forms:
            expected = signature(self._secret, content(ext, req.body, leave_out))
            if hmac.compare_digest(given.encode(), expected.encode()):
                return None
        return f"the signature does not match the secret key of access key {key}"
