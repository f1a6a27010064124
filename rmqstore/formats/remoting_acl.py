"""RocketMQ 4.x's ACL signature on a remoting request: what a client with credentials adds
(Java ``AclClientRPCHook``, ali-ons' ``accessKeyId``, mqadmin with ``conf/tools.yml``) and
what a broker with ACL checks (``services.remoting.acl``).

Two ext fields: ``AccessKey``, and ``Signature``, the Base64 HMAC-SHA1, keyed with the
secret, of::

    the value of each ext field but Signature (AccessKey included), in the order of the
    field names, back to back (UTF-8), then the body's bytes (none when there is no body)

So ``{"b": "2", "a": "1", "AccessKey": "ak"}`` with body ``xy`` signs ``ak12xy`` (upper-case
names sort first; names sort by code point, as Java's ``TreeMap`` sorts ASCII names).
"""

import base64
import dataclasses
import hashlib
import hmac

from rmqstore.formats.remoting import Command

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"


def content(ext: dict[str, str], body: bytes | None, leave_out: str = "") -> bytes:
    """What a request's signature covers (``leave_out``: one more field not covered)."""
    text = "".join(ext[k] for k in sorted(ext) if k != SIGNATURE and k != leave_out)
    return text.encode() + (body or b"")


def signature(secret_key: str, signed: bytes) -> str:
    return base64.b64encode(hmac.new(secret_key.encode(), signed, hashlib.sha1).digest()).decode()


def sign(cmd: Command, access_key: str, secret_key: str) -> Command:
    """``cmd`` with its ``AccessKey`` and ``Signature`` (a copy: ``cmd`` is not changed)."""
    ext = {**(cmd.ext or {}), ACCESS_KEY: access_key}
    ext[SIGNATURE] = signature(secret_key, content(ext, cmd.body))
    return dataclasses.replace(cmd, ext=ext)
