"""Optional access keys: the ``authorization`` header RocketMQ 5 clients sign.

``authorization: MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time,
Signature=<hex HMAC-SHA1(secret key, value of x-mq-date-time)>``. Python signs in lower-case
hex, Node.js in upper case; both are accepted.

The signature covers only the date, so a captured header is as good as the key for as long
as its date is accepted: a call whose ``x-mq-date-time`` is missing, not a date, or farther
than the window (``--signature-window``, 15 minutes by default) from the proxy's clock is
refused, and the refusal says which. The date is read as UTC, as the Node.js client and the
``rmqstore`` commands write it; the Python client writes its local time with a ``Z``, so it
must run with ``TZ=UTC`` (or within the window of UTC).

Every service on the proxy's port checks the same way: ``MessagingService`` answers
UNAUTHORIZED in its reply's status, ``ConsumerGroups`` with the gRPC status
UNAUTHENTICATED.
"""

import hmac
import time
from collections.abc import Callable

from rmqstore.access_keys import DATE_HEADER, SCHEME, parse_date, signature
from rmqstore.access_keys import sign as sign  # re-exported for tests and tools
from services.proxy.status import BusinessError, Code


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
    def __init__(self, access_key: str, secret_key: str, window_s: float = 900.0,
                 clock: Callable[[], float] = time.time) -> None:  # fmt: skip
        self.access_key = access_key
        self.secret_key = secret_key
        self.window_s = window_s
        self.clock = clock

    @property
    def enabled(self) -> bool:
        return bool(self.access_key)

    def check(self, metadata: dict[str, str]) -> None:
        """Raise UNAUTHORIZED unless the call is signed with the configured key, at a date
        within the window of now."""
        if not self.enabled:
            return
        header = metadata.get("authorization", "")
        if not header:
            raise BusinessError(Code.UNAUTHORIZED, "this server requires an access key")
        f = _fields(header)
        if f.get("Credential", "") != self.access_key:
            raise BusinessError(Code.UNAUTHORIZED, "unknown access key")
        if f.get("SignedHeaders", "").lower() != DATE_HEADER:
            raise BusinessError(Code.UNAUTHORIZED, f"SignedHeaders must be {DATE_HEADER}")
        date = metadata.get(DATE_HEADER, "")
        if not date:
            raise BusinessError(Code.UNAUTHORIZED, f"the {DATE_HEADER} header is missing: a "
                                "signed call must carry the date it was signed at")
        try:
            signed_at = parse_date(date)
        except ValueError:
            raise BusinessError(Code.UNAUTHORIZED, f"{DATE_HEADER} {date[:40]!r} is not "
                                "yyyyMMdd'T'HHmmss'Z'") from None
        expected = signature(self.secret_key, date)
        if not hmac.compare_digest(expected, f.get("Signature", "").lower()):
            raise BusinessError(Code.UNAUTHORIZED, "signature does not match the secret key")
        skew = signed_at - self.clock()
        if abs(skew) > self.window_s:
            when = "ahead of" if skew > 0 else "behind"
            raise BusinessError(
                Code.UNAUTHORIZED,
                f"{DATE_HEADER} {date} is {abs(skew):.0f} s {when} the proxy's clock (UTC), "
                f"outside the {self.window_s:.0f} s window: a replayed or stale signature, "
                "or a client clock (or time zone) that is off",
            )  # fmt: skip
