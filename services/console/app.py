"""The console's aiohttp application: pages under ``/``, the same documents as JSON under
``/api/v1/``, static files shipped in the package."""

import json
from pathlib import Path
from typing import Any

import jinja2
from aiohttp import web

from rmqstore.times import format_time
from services.console import groups, views
from services.console.auth import Authenticator
from services.console.backend import Backend, BackendError
from services.console.params import ParamError
from services.console.security import USER_KEY, allowed_hosts, authenticate, headers, read_only

HERE = Path(__file__).parent
API = "/api/v1"
TEMPLATES = web.AppKey("templates", jinja2.Environment)
PAGES: list[tuple[str, views.View, str]] = [  # path, view, navigation section
    ("/messages", views.messages, "messages"),
    ("/messages/{id}", views.message, "messages"),
    ("/topics", views.topics, "topics"),
    ("/topics/{topic}", views.topic, "topics"),
    ("/groups", groups.groups, "groups"),
    ("/groups/{group}", groups.group, "groups"),
    ("/store", views.store, "store"),
]


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every template is HTML: bodies and properties are text only
        undefined=jinja2.StrictUndefined,
    )
    env.filters["when"] = lambda ms: format_time(int(ms)) if ms is not None else ""
    env.filters["bytes"] = _human_bytes
    env.filters["age"] = _age
    return env


def _human_bytes(n: int | None) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n:,} B" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _age(ms: int) -> str:
    """``45 s``, ``12 min``, ``3.5 h``, ``2.1 d``: how long ago, coarse (clocks may differ)."""
    s = max(int(ms), 0) / 1000
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h" if s < 172800 else f"{s / 86400:.1f} d"


def _error(status: int, message: str, code: str) -> dict[str, Any]:
    return {"error": message, "status": status, "code": code}


def _failure(e: Exception) -> tuple[int, str, str]:
    if isinstance(e, ParamError):
        return 400, str(e), "INVALID_ARGUMENT"
    assert isinstance(e, BackendError)
    return e.status, str(e), e.code


def _json(doc: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(doc, ensure_ascii=False), status=status,
                        content_type="application/json")


def api_handler(view: views.View) -> Any:
    async def handle(request: web.Request) -> web.Response:
        try:
            answer = await view(request)
        except (ParamError, BackendError) as e:
            status, message, code = _failure(e)
            return _json(_error(status, message, code), status)
        return _json(answer.doc)

    return handle


def render(request: web.Request, template: str, section: str, status: int = 200,
           **context: Any) -> web.Response:
    env = request.app[TEMPLATES]
    html = env.get_template(template).render(
        section=section, user=request.get(USER_KEY, ""), request_path=request.path_qs,
        **context)
    return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")


def page_handler(view: views.View, section: str) -> Any:
    async def handle(request: web.Request) -> web.Response:
        try:
            answer = await view(request)
        except (ParamError, BackendError) as e:
            status, message, code = _failure(e)
            form = {k: request.query.get(k, "") for k in
                    ("topic", "key", "begin", "end", "max", "cursor")}
            return render(request, "error.html", section, status, status_code=status,
                          message=message, code=code, form=form)
        return render(request, answer.template, section, doc=answer.doc, **answer.context)

    return handle


async def raw_handler(request: web.Request) -> web.StreamResponse:
    try:
        return await views.raw_body(request)
    except (ParamError, BackendError) as e:
        status, message, _code = _failure(e)
        return web.Response(text=message + "\n", status=status)


async def index(_request: web.Request) -> web.Response:
    raise web.HTTPFound("/messages")


async def healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


def build(backend: Backend, settings: views.Settings, auth: Authenticator,
          hosts: frozenset[str] | None = None) -> web.Application:
    """``hosts``: the names the console answers under (``None``: any)."""
    app = web.Application(
        middlewares=[headers, allowed_hosts(hosts), read_only, authenticate(auth)],
        client_max_size=64 * 1024)
    app[views.BACKEND] = backend
    app[views.SETTINGS] = settings
    app[TEMPLATES] = environment()
    app.router.add_get("/", index)
    app.router.add_get("/healthz", healthz)
    for path, view, section in PAGES:
        app.router.add_get(path, page_handler(view, section))
        app.router.add_get(API + path, api_handler(view))
    app.router.add_get("/messages/{id}/raw", raw_handler)
    app.router.add_static("/static", HERE / "static", append_version=False)

    async def close_backend(_app: web.Application) -> None:
        await backend.close()

    app.on_cleanup.append(close_backend)
    return app
