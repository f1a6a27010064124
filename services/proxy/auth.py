"""Optional access keys: the ``authorization`` header RocketMQ 5 clients sign.

``authorization: MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time,
Signature=<hex HMAC-SHA1(secret key, value of x-mq-date-time)>``. Python signs in lower-case
hex, Node.js in upper case; both are accepted. The date is not checked against the clock
(the Python client sends local time without a zone).
"""

import hashlib
import hmac

from services.proxy.status import BusinessError, Code

SCHEME = "MQv2-HMAC-SHA1"


def _fields(header: str) -> dict[str, str]:
    scheme, _, rest = header.strip().partition(" ")
    if scheme != SCHEME:
        raise BusinessError(Code.UNAUTHORIZED, f"authorization scheme must be {SCHEME}")
    out = {}
    for part in rest.split(","):
        key, _, value = part.strip().partition("=")
        out[key] = value
    return out


class Authenticator:
    def __init__(self, access_key: str, secret_key: str) -> None:
        self.access_key = access_key
        self.secret_key = secret_key.encode()

    @property
    def enabled(self) -> bool:
        return bool(self.access_key)

    def check(self, metadata: dict[str, str]) -> None:
        """Raise UNAUTHORIZED unless the call is signed with the configured key."""
        if not self.enabled:
            return
        header = metadata.get("authorization", "")
        if not header:
            raise BusinessError(Code.UNAUTHORIZED, "this server requires an access key")
        f = _fields(header)
        if f.get("Credential", "") != self.access_key:
            raise BusinessError(Code.UNAUTHORIZED, "unknown access key")
        if f.get("SignedHeaders", "").lower() != "x-mq-date-time":
            raise BusinessError(Code.UNAUTHORIZED, "SignedHeaders must be x-mq-date-time")
        date = metadata.get("x-mq-date-time", "")
        expected = hmac.new(self.secret_key, date.encode(), hashlib.sha1).hexdigest()
        if not hmac.compare_digest(expected, f.get("Signature", "").lower()):
            raise BusinessError(Code.UNAUTHORIZED, "signature does not match the secret key")


def sign(access_key: str, secret_key: str, date: str) -> str:
    """The header value a client sends (used by tests and tools)."""
    sig = hmac.new(secret_key.encode(), date.encode(), hashlib.sha1).hexdigest()
    return f"{SCHEME} Credential={access_key}, SignedHeaders=x-mq-date-time, Signature={sig}"
