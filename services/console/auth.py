"""Who may read: ``none`` (loopback binds only), ``basic`` (users from a file of scrypt
hashes, then a session cookie) or ``proxy-header`` (an identity header, trusted only from
configured proxy addresses).

Users file: one user a line, ``#`` starts a comment::

    alice:scrypt:16384:8:1:<salt, base64>:<hash, base64>

``python -m services.console --hash-password NAME`` reads a password on stdin and prints the
line. The session cookie is ``user.expiry.signature`` (HMAC-SHA256 under a key made at start,
so a restart ends every session), HttpOnly, SameSite=Strict, and Secure when the request
came over TLS or ``--secure-cookie`` says TLS ends in front of the console.
"""

import base64
import binascii
import hashlib
import hmac
import ipaddress
import math
import secrets
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

MODES = ("none", "basic", "proxy-header")
COOKIE = "rmqstore_session"
SESSION_SECONDS = 8 * 3600
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
MAX_CREDENTIALS = 1024  # longest Authorization header value looked at
# failed logins a client address may make in a window; then 429 until the oldest one ages out
MAX_FAILED_LOGINS, FAILED_LOGIN_WINDOW_S = 5, 60.0
MAX_TRACKED_CLIENTS = 10_000


class AuthConfigError(ValueError):
    """A configuration the console refuses to start with."""


@dataclass(frozen=True)
class UserHash:
    n: int
    r: int
    p: int
    salt: bytes
    digest: bytes

    def matches(self, password: str) -> bool:
        got = hashlib.scrypt(password.encode(), salt=self.salt, n=self.n, r=self.r, p=self.p,
                             dklen=len(self.digest), maxmem=256 * 1024 * 1024)
        return hmac.compare_digest(got, self.digest)


def hash_line(user: str, password: str) -> str:
    """One users-file line for ``user`` with a fresh salt."""
    if not user or ":" in user:
        raise AuthConfigError("a user name must be non-empty and hold no ':'")
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P,
                            dklen=32)
    b64 = base64.b64encode
    return (f"{user}:scrypt:{SCRYPT_N}:{SCRYPT_R}:{SCRYPT_P}:{b64(salt).decode()}:"
            f"{b64(digest).decode()}")


def load_users(path: str | Path) -> dict[str, UserHash]:
    users: dict[str, UserHash] = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise AuthConfigError(f"users file {path}: {e.strerror}") from None
    for no, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(":")
        try:
            if len(parts) != 7 or parts[1] != "scrypt":
                raise ValueError
            n, r, p = int(parts[2]), int(parts[3]), int(parts[4])
            salt, digest = base64.b64decode(parts[5], validate=True), \
                base64.b64decode(parts[6], validate=True)
            if n < 2 or n & (n - 1) or r < 1 or p < 1 or len(digest) < 16:
                raise ValueError
        except (ValueError, binascii.Error):
            raise AuthConfigError(
                f"users file {path} line {no}: expected name:scrypt:N:r:p:salt:hash "
                "(make one with --hash-password)") from None
        users[parts[0]] = UserHash(n, r, p, salt, digest)
    if not users:
        raise AuthConfigError(f"users file {path} names no user")
    return users


def is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_networks(items: Iterable[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    nets = []
    for item in items:
        for part in item.split(","):
            if part.strip():
                try:
                    nets.append(ipaddress.ip_network(part.strip(), strict=False))
                except ValueError:
                    raise AuthConfigError(f"trusted proxy {part!r} is not an address or "
                                          "network") from None
    return nets


@dataclass
class LoginLimiter:
    """Failed logins per client address: after ``max_failures`` within ``window_s``, the
    client is refused (429) until the oldest of them is ``window_s`` old. ``clock`` is
    monotonic seconds (a test passes its own)."""

    max_failures: int = MAX_FAILED_LOGINS
    window_s: float = FAILED_LOGIN_WINDOW_S
    clock: Callable[[], float] = time.monotonic
    failures: dict[str, deque[float]] = field(default_factory=dict)

    def _recent(self, client: str, now: float) -> deque[float]:
        times = self.failures.get(client, deque())
        while times and times[0] <= now - self.window_s:
            times.popleft()
        return times

    def retry_after(self, client: str) -> int:
        """Whole seconds until ``client`` may try again (0: now)."""
        now = self.clock()
        times = self._recent(client, now)
        if not times:
            self.failures.pop(client, None)
            return 0
        if len(times) < self.max_failures:
            return 0
        return max(1, math.ceil(times[0] + self.window_s - now))

    def failed(self, client: str) -> None:
        now = self.clock()
        if client not in self.failures and len(self.failures) >= MAX_TRACKED_CLIENTS:
            for other in list(self.failures):  # forget those whose failures aged out
                if not self._recent(other, now):
                    del self.failures[other]
            if len(self.failures) >= MAX_TRACKED_CLIENTS:
                self.failures.pop(next(iter(self.failures)))
        times = self.failures.setdefault(client, deque())
        times.append(now)
        while len(times) > self.max_failures:
            times.popleft()


@dataclass
class Authenticator:
    mode: str
    users: dict[str, UserHash] = field(default_factory=dict)
    proxies: list = field(default_factory=list)
    header: str = "X-Forwarded-User"
    secure_cookie: bool = False  # mark the session cookie Secure (HTTPS in front)
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    logins: LoginLimiter = field(default_factory=LoginLimiter)

    @classmethod
    def configure(cls, mode: str, listen_host: str, users_file: str | None,
                  proxies: Iterable[str], header: str) -> "Authenticator":
        if mode not in MODES:
            raise AuthConfigError(f"--auth must be one of {', '.join(MODES)}")
        if mode == "none" and not is_loopback(listen_host):
            raise AuthConfigError(
                f"--auth none is allowed only on a loopback address, not {listen_host!r}: "
                "use --auth basic or --auth proxy-header")
        if mode == "basic":
            if not users_file:
                raise AuthConfigError("--auth basic needs --users-file")
            return cls(mode, users=load_users(users_file))
        if mode == "proxy-header":
            nets = parse_networks(proxies)
            if not nets:
                raise AuthConfigError("--auth proxy-header needs --trusted-proxy")
            if not header:
                raise AuthConfigError("--identity-header must not be empty")
            return cls(mode, proxies=nets, header=header)
        return cls(mode)

    # -- sessions ------------------------------------------------------------------------
    def _sign(self, payload: str) -> str:
        mac = hmac.new(self.key, payload.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def session_cookie(self, user: str, now: float | None = None) -> str:
        expiry = int((time.time() if now is None else now) + SESSION_SECONDS)
        user_b64 = base64.urlsafe_b64encode(user.encode()).decode().rstrip("=")
        payload = f"{user_b64}.{expiry}"
        return f"{payload}.{self._sign(payload)}"

    def session_user(self, cookie: str, now: float | None = None) -> str | None:
        parts = cookie.split(".")
        if len(parts) != 3 or len(cookie) > MAX_CREDENTIALS:
            return None
        payload = f"{parts[0]}.{parts[1]}"
        if not hmac.compare_digest(self._sign(payload), parts[2]):
            return None
        try:
            if int(parts[1]) < (time.time() if now is None else now):
                return None
            return base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)).decode()
        except (ValueError, binascii.Error):
            return None

    # -- checks --------------------------------------------------------------------------
    def basic_credentials(self, header: str) -> tuple[str, str] | None:
        if len(header) > MAX_CREDENTIALS or header[:6].lower() != "basic ":
            return None
        try:
            user, _, password = base64.b64decode(header[6:].strip(), validate=True) \
                .decode("utf-8").partition(":")
        except (ValueError, binascii.Error):
            return None
        return user, password

    def check_password(self, user: str, password: str) -> bool:
        known = self.users.get(user)
        if known is None:
            # spend the same time as for a real user, so names cannot be probed by timing
            next(iter(self.users.values())).matches(password + "\x00")
            return False
        return known.matches(password)

    def trusted_peer(self, peer: str | None) -> bool:
        if not peer:
            return False
        try:
            addr = ipaddress.ip_address(peer.split("%")[0])
        except ValueError:
            return False
        return any(addr in net for net in self.proxies)
