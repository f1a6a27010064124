"""Middlewares every request passes: security headers, the ``Host`` check, read-only
methods, authentication (failed logins limited per client address)."""

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from services.console.auth import COOKIE, SESSION_SECONDS, Authenticator

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# scripts and styles only from the console's own static files: no inline script, no eval
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}
OPEN_PATHS = ("/healthz",)  # answered without credentials (liveness probes)
USER_KEY = "rmqstore.user"


@web.middleware
async def headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPException as e:
        response = e
    response.headers.update(HEADERS)
    if not request.path.startswith("/static/"):
        response.headers["Cache-Control"] = "no-store"
    return response


@web.middleware
async def read_only(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.method not in ("GET", "HEAD"):
        raise web.HTTPMethodNotAllowed(request.method, ["GET", "HEAD"],
                                       text="the console is read-only")
    return await handler(request)


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port, lower case (``[::1]:80`` -> ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    if header.count(":") == 1:
        header = header.partition(":")[0]
    return header.rstrip(".")


def allowed_hosts(names: frozenset[str] | None) -> Callable:
    """Answer 421 to a request whose ``Host`` is not one the console is served under: a
    page of another site, its name rebound to the console's address (DNS rebinding), names
    its own host. ``None``: every name (credentials guard the console)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if names is not None and request.path not in OPEN_PATHS:
            name = host_name(request.headers.get("Host", ""))
            if name not in names:
                raise web.HTTPMisdirectedRequest(
                    text=f"this console is not served under the name {name[:100]!r} "
                    "(see --allowed-host)")  # fmt: skip
        return await handler(request)

    return middleware


def _peer(request: web.Request) -> str | None:
    """The TCP peer's address (never a forwarded header: those are the proxy check's job)."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return str(peer[0]) if peer else None


def _refuse_basic() -> web.HTTPUnauthorized:
    return web.HTTPUnauthorized(
        headers={"WWW-Authenticate": 'Basic realm="rmqstore console", charset="UTF-8"'},
        text="credentials required")


def authenticate(auth: Authenticator) -> Callable:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS or auth.mode == "none":
            return await handler(request)
        if auth.mode == "proxy-header":
            if not auth.trusted_peer(_peer(request)):
                raise web.HTTPForbidden(text="requests must come through a trusted proxy")
            user = request.headers.get(auth.header, "").strip()
            if not user:
                raise web.HTTPUnauthorized(text=f"the proxy sent no {auth.header} header")
            request[USER_KEY] = user
            return await handler(request)
        cookie_user = auth.session_user(request.cookies.get(COOKIE, ""))
        if cookie_user is not None and cookie_user in auth.users:
            request[USER_KEY] = cookie_user
            return await handler(request)
        creds = auth.basic_credentials(request.headers.get("Authorization", ""))
        if creds is None:
            raise _refuse_basic()
        client = _peer(request) or "?"
        wait = auth.logins.retry_after(client)
        if wait:
            raise web.HTTPTooManyRequests(headers={"Retry-After": str(wait)},
                                          text="too many failed logins: try again later")
        ok = await asyncio.to_thread(auth.check_password, *creds)
        if not ok:
            auth.logins.failed(client)
            raise _refuse_basic()
        request[USER_KEY] = creds[0]
        response = await handler(request)
        response.set_cookie(COOKIE, auth.session_cookie(creds[0]), max_age=SESSION_SECONDS,
                            path="/", httponly=True, samesite="Strict",
                            secure=request.secure or auth.secure_cookie)
        return response

    return middleware
