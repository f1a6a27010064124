"""Handlers: each builds one JSON document; the page renders it, ``/api/v1/`` returns it.

The documents of ``/messages`` and ``/messages/<id>`` are the CLI's ``query-key --json`` and
``query-id --json`` (:mod:`rmqstore.message_json`).
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from rmqstore.errors import StoreError
from rmqstore.formats.msgid import decode_offset_msg_id, uniq_key_parts, uniq_key_time
from rmqstore.layout import StoreLayout
from rmqstore.message_json import cluster_fields, id_fields, key_fields, with_messages
from services.console import body, browse, params, store_info
from services.console.backend import Backend, BackendError

Doc = dict[str, Any]


@dataclass
class Settings:
    layout: StoreLayout
    max_window_ms: int  # widest time window a page may ask for without a key or id
    index_entries: int


BACKEND = web.AppKey("backend", Backend)
SETTINGS = web.AppKey("settings", Settings)


@dataclass
class Answer:
    doc: Doc
    template: str
    context: dict[str, Any]


View = Callable[[web.Request], Awaitable[Answer]]


def _link(path: str, **query: Any) -> str:
    kept = {k: v for k, v in query.items() if v not in ("", None)}
    return path + ("?" + urlencode(kept) if kept else "")


# -- /messages ---------------------------------------------------------------------------
async def messages(request: web.Request) -> Answer:
    q = request.query
    form = {k: q.get(k, "") for k in ("topic", "key", "begin", "end", "max", "cursor",
                                      "scope")}  # fmt: skip
    if not q.get("topic") and not q.get("key") and not request.path.startswith("/api/"):
        return Answer({}, "messages.html", {"form": form, "searched": False})
    topic = params.text(q, "topic", required=True)  # the query service checks both
    key = params.raw(q, "key")
    begin = params.time_ms(q, "begin", 0) or 0
    end = params.time_ms(q, "end", 0) or 0
    size = params.page_size(q)
    cursor = params.text(q, "cursor")
    trail = params.trail(q)
    cluster = params.cluster_scope(q)
    resp = await request.app[BACKEND].by_key(topic, key, begin, end, size, cursor, cluster)
    doc = _cluster_doc(with_messages(key_fields(resp), resp.messages), resp, cluster)
    same = {"topic": topic, "key": key, "begin": q.get("begin", ""), "end": q.get("end", ""),
            "max": q.get("max", ""), "scope": "cluster" if cluster else ""}
    nav = {}
    if resp.cursor:
        nav["next"] = _link("/messages", **same, cursor=resp.cursor,
                            trail=".".join([*trail, cursor or "0"]))
    if cursor:
        back = trail[-1] if trail else "0"
        nav["prev"] = _link("/messages", **same, cursor="" if back == "0" else back,
                            trail=".".join(trail[:-1]))
    return Answer(doc, "messages.html", {"form": form, "searched": True, "nav": nav,
                                         "page": len(trail) + (1 if cursor else 0) + 1})


def _cluster_doc(doc: Doc, resp: Any, cluster: bool) -> Doc:
    """A cluster-wide answer's ``partial`` and ``brokers``, and each message's ``broker``
    (as ``query-key --cluster --json``)."""
    if not cluster:
        return doc
    for m, broker in zip(doc["messages"], resp.message_brokers, strict=True):
        m["broker"] = broker
    return {**doc, **cluster_fields(resp)}


# -- /messages/<id> ----------------------------------------------------------------------
def decoded_id(text: str, now_ms: int) -> dict[str, Any]:
    """What an id says by itself: store host and commitlog offset of an offset id; address,
    pid and time of a UNIQ_KEY (both forms are 32 or 56 hex digits, so both are tried)."""
    out: dict[str, Any] = {}
    try:
        ip, port, offset = decode_offset_msg_id(text)
        out["offsetId"] = {"storeHost": _host(ip, port), "commitlogOffset": offset}
    except StoreError:
        pass
    try:
        parts = uniq_key_parts(text)
        out["uniqKey"] = {"ip": _host(parts.ip, None), "pid": parts.pid,
                          "approxTime": uniq_key_time(text, now_ms)}
    except (StoreError, ValueError, OverflowError):
        pass
    return out


def _host(ip: bytes, port: int | None) -> str:
    import ipaddress

    addr = str(ipaddress.ip_address(ip))
    if port is None:
        return addr
    return f"[{addr}]:{port}" if len(ip) == 16 else f"{addr}:{port}"


async def message(request: web.Request) -> Answer:
    msg_id = request.match_info["id"].strip()
    if not msg_id or len(msg_id) > params.MAX_TEXT:
        raise params.ParamError("a message id is required")
    topic = params.topic(request.query, required=False)
    cluster = params.cluster_scope(request.query)
    resp = await request.app[BACKEND].by_id(msg_id, topic, cluster)
    doc = _cluster_doc(with_messages(id_fields(resp), resp.messages), resp, cluster)
    if not resp.messages:
        raise BackendError(f"no message has the id {msg_id!r}", 404, "NOT_FOUND")
    from rmqstore.times import now_ms

    shown = [{"m": m, "doc": d, "body": body.view(m.body),
              "msgIdDecoded": decoded_id(m.msg_id, now_ms()),
              "uniqDecoded": decoded_id(m.unique_key, now_ms()) if m.unique_key else {},
              "raw": _link(f"/messages/{msg_id}/raw", topic=topic, index=i,
                           scope="cluster" if cluster else "")}
             for i, (m, d) in enumerate(zip(resp.messages, doc["messages"], strict=True))]
    return Answer(doc, "message.html", {"id": msg_id, "shown": shown,
                                        "limit": body.SHOW_LIMIT})


async def raw_body(request: web.Request) -> web.StreamResponse:
    msg_id = request.match_info["id"].strip()
    topic = params.topic(request.query, required=False)
    index = params.integer(request.query, "index", 0, 0, 1_000_000)
    resp = await request.app[BACKEND].by_id(msg_id, topic, params.cluster_scope(request.query))
    if index >= len(resp.messages):
        raise BackendError(f"no message has the id {msg_id!r}", 404, "NOT_FOUND")
    m = resp.messages[index]
    safe = "".join(c for c in m.msg_id if c.isalnum())[:64] or "message"
    return web.Response(body=m.body, content_type="application/octet-stream", headers={
        "Content-Disposition": f'attachment; filename="{safe}.bin"'})


# -- /topics ---------------------------------------------------------------------------
async def topics(request: web.Request) -> Answer:
    doc = await store_info.topics_doc(request.app[BACKEND], request.app[SETTINGS].layout)
    return Answer(doc, "topics.html", {})


async def topic(request: web.Request) -> Answer:
    settings = request.app[SETTINGS]
    q = request.query
    name = params.checked_topic(request.match_info["topic"])
    all_queues = store_info.topic_queues(settings.layout).get(name)
    if not all_queues:
        raise BackendError(f"topic {name!r} has no queue in this store", 404, "NOT_FOUND")
    order = q.get("order", "newest")
    if order not in ("newest", "oldest"):
        raise params.ParamError("order must be newest or oldest")
    queue_text = q.get("queue", "").strip()
    queue = params.integer(q, "queue", -1, 0, 2**31 - 1) if queue_text else None
    if queue is not None and queue not in all_queues:
        raise BackendError(f"topic {name!r} has no queue {queue}", 404, "NOT_FOUND")
    offset = params.integer(q, "offset", -1) if q.get("offset", "").strip() else None
    if offset is not None and queue is None:
        raise params.ParamError("an offset needs a queue")
    begin, end = params.time_ms(q, "begin"), params.time_ms(q, "end")
    cap = settings.max_window_ms
    if begin is not None and end is None:
        end = begin + cap
    elif end is not None and begin is None:
        begin = max(end - cap, 0)
    if begin is not None and end is not None:
        if end < begin:
            raise params.ParamError("end is before begin")
        if end - begin > cap:
            raise params.ParamError(
                f"a time window without a key or id is at most {cap // 1000} s wide; "
                "narrow begin..end or search by key")
    req = browse.BrowseRequest(
        name, [queue] if queue is not None else sorted(all_queues), order == "newest",
        params.page_size(q, 20) or 20, begin, end, offset, params.text(q, "cursor"))
    backend = request.app[BACKEND]
    rows = await store_info.queue_rows(backend, name, sorted(all_queues))
    page = await browse.browse(backend, req)
    doc = {**browse.page_doc(req, page), "queue": queue, "begin": begin, "end": end,
           "queues": rows}
    trail = params.trail(q)
    same = {k: q.get(k, "") for k in ("queue", "offset", "begin", "end", "order", "max")}
    nav = {}
    if page.cursor:
        nav["next"] = _link(f"/topics/{name}", **same, cursor=page.cursor,
                            trail=".".join([*trail, req.cursor or "0"]))
    if req.cursor:
        back = trail[-1] if trail else "0"
        nav["prev"] = _link(f"/topics/{name}", **same, cursor="" if back == "0" else back,
                            trail=".".join(trail[:-1]))
    form = {k: q.get(k, "") for k in ("queue", "offset", "begin", "end", "max")}
    form["order"] = order
    return Answer(doc, "topic.html", {"topic": name, "nav": nav, "form": form,
                                      "queue_ids": sorted(all_queues),
                                      "cap_s": cap // 1000})


# -- /store ----------------------------------------------------------------------------
async def store(request: web.Request) -> Answer:
    s = request.app[SETTINGS]
    doc = await store_info.store_doc(request.app[BACKEND], s.layout, s.index_entries)
    return Answer(doc, "store.html", {})
