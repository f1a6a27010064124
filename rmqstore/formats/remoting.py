"""RocketMQ 4.x "remoting" frames: what a 4.x client, ``mqadmin``, a broker and a name server
send each other over TCP (``spec/rocketmq-remoting.md`` §1).

┌──────────────┬──────────────────────────────┬──────────┬────────┐
│ int32 length │ int32 (type << 24)|headerLen │ header   │ body   │
└──────────────┴──────────────────────────────┴──────────┴────────┘
Big-endian. length = 4 + headerLen + bodyLen (it excludes itself); the body has no length of
its own. type 0: the header is UTF-8 JSON (fastjson's ``RemotingCommand``: keys sorted, nulls
left out); type 1: RocketMQ's binary header:

┌────────────┬───────────────┬───────────────┬──────────────┬────────────┬─────────────────┐
│ int16 code │ int8 language │ int16 version │ int32 opaque │ int32 flag │ int32 remarkLen │ …
└────────────┴───────────────┴───────────────┴──────────────┴────────────┴─────────────────┘
… remark │ int32 extLen │ extLen bytes of { int16 keyLen │ key │ int32 valueLen │ value } │
A zero-length remark or value decodes as null (None).

flag: bit 0 response, bit 1 oneway. A response echoes its request's ``opaque`` (per
connection) and is written in the request's header type (a JSON request must never be
answered in type 1: ali-ons reads the header length without masking the type byte).

Everything here is a pure function over buffers; the services own the sockets.
"""

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from rmqstore.formats import fastjson

FRAME_MAX = 16 * 1024 * 1024  # com.rocketmq.remoting.frameMaxLength, both sides
LENGTH = struct.Struct(">i")  # the frame's length (excludes itself); also the header word
HEADER_WORD = struct.Struct(">i")  # (serialize type << 24) | header length
PREFIX = struct.Struct(">ii")  # length, header word: the first 8 bytes of a frame
PREFIX_SIZE = PREFIX.size  # 8
BINARY_FIXED = struct.Struct(">hbhiii")  # code, language, version, opaque, flag, remark length
BINARY_FIXED_SIZE = BINARY_FIXED.size  # 17
INT32 = struct.Struct(">i")
_INT32_AT = INT32.unpack_from
INT16 = struct.Struct(">h")

JSON = 0  # serialize type: JSON header
ROCKETMQ = 1  # serialize type: binary header

FLAG_RESPONSE = 1
FLAG_ONEWAY = 2

VERSION_4_9_8 = 409  # MQVersion ordinal this server speaks as (a heartbeat answer's version)
LANGUAGES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP",
             "GO", "PHP", "OMS", "RUST")  # fmt: skip
_LANGUAGE_INDEX = {name: i for i, name in enumerate(LANGUAGES)}
# headers and JSON bodies: keys sorted, compact (one encoder, not one a call)
_COMPACT_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_JSON_DECODER = json.JSONDecoder()


class RequestCode(IntEnum):
    """Request codes (``RequestCode.java``) this project serves or sends."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    RESET_CONSUMER_CLIENT_OFFSET = 220
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    GET_KVLIST_BY_NAMESPACE = 219
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_CONSUMER_RUNNING_INFO = 307
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    QUERY_DATA_VERSION = 322
    ADD_WRITE_PERM_OF_BROKER = 327


class ResponseCode(IntEnum):
    """Response codes (``ResponseCode.java``, ``RemotingSysResponseCode``)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    CONSUMER_NOT_ONLINE = 206
    FLOW_CONTROL = 215


def code_name(code: int, response: bool = False) -> str:
    """A code's name for logs and metrics (its number when unknown)."""
    names = ResponseCode if response else RequestCode
    try:
        return names(code).name
    except ValueError:
        return str(code)


class FrameError(ValueError):
    """A frame that cannot be decoded: its connection is closed."""


def java_string(value: Any) -> str:
    """An extFields value as Java's ``toString`` would write it (``true``, not ``True``)."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


@dataclass
class Command:
    """One ``RemotingCommand``: a request or a response. ``ext`` is the custom header
    (``extFields``): None when the command has none (left out of the JSON), else strings."""

    code: int
    opaque: int = 0
    flag: int = 0
    ext: dict[str, str] | None = None
    body: bytes = b""
    remark: str | None = None
    language: str = "JAVA"
    version: int = VERSION_4_9_8
    serialize_type: int = JSON
    extra: dict[str, Any] = field(default_factory=dict)  # unknown JSON header keys, kept
    # more of the body, after ``body``: pieces (views of mapped records) copied once, into
    # the frame as it is written
    pieces: Sequence[bytes | memoryview] = ()

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def field(self, name: str, default: str | None = None) -> str | None:
        """An extFields value (``default`` when absent or null)."""
        if self.ext is None:
            return default
        value = self.ext.get(name)
        return default if value is None else value

    def required(self, name: str) -> str:
        """An extFields value the request must carry (``ValueError`` naming it, the remark
        RocketMQ's broker answers a request missing a field with)."""
        value = self.field(name)
        if value is None:
            raise ValueError(f"the custom field <{name}> is null")
        return value

    def number(self, name: str, default: int | None = None) -> int:
        """An extFields value as an integer (``default`` when absent; ``ValueError`` when
        absent without a default, or not a number)."""
        value = self.field(name)
        if value is None:
            if default is None:
                raise ValueError(f"the custom field <{name}> is null")
            return default
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"the custom field <{name}> is not a number: {value}") from None


def response_to(request: Command, code: int = ResponseCode.SUCCESS,
                ext: dict[str, str] | None = None, body: bytes = b"",
                remark: str | None = None) -> Command:  # fmt: skip
    """The answer to ``request``: its opaque, its header type, flag response."""
    return Command(code=int(code), opaque=request.opaque, flag=FLAG_RESPONSE, ext=ext, body=body,
                   remark=remark, serialize_type=request.serialize_type)  # fmt: skip


# --- decoding ---------------------------------------------------------------------------------


def frame_length(prefix: bytes | memoryview) -> int:
    """The length field of a frame (the bytes that follow it); FrameError when it is out of
    bounds (less than the header word, or more than ``FRAME_MAX``)."""
    (length,) = LENGTH.unpack_from(prefix, 0)
    if length < HEADER_WORD.size or length > FRAME_MAX:
        raise FrameError(f"frame length {length} outside 4..{FRAME_MAX}")
    return length


def decode(payload: bytes | memoryview) -> Command:
    """A frame without its length field (header word, header, body) as a ``Command``."""
    if len(payload) < HEADER_WORD.size:
        raise FrameError(f"frame of {len(payload)} bytes has no header word")
    (word,) = HEADER_WORD.unpack_from(payload, 0)
    serialize_type = (word >> 24) & 0xFF
    header_len = word & 0xFFFFFF
    end = HEADER_WORD.size + header_len
    if end > len(payload):
        raise FrameError(f"header length {header_len} exceeds the frame ({len(payload)} bytes)")
    header = bytes(payload[HEADER_WORD.size : end])
    if serialize_type == JSON:
        cmd = _decode_json_header(header)
    elif serialize_type == ROCKETMQ:
        cmd = _decode_binary_header(header)
    else:
        raise FrameError(f"unknown serialize type {serialize_type}")
    cmd.body = bytes(payload[end:])
    return cmd


def split(buf: bytes | bytearray | memoryview) -> tuple[list[Command], int]:
    """Every whole frame at the start of ``buf`` and how many bytes they took."""
    out = []
    at = 0
    view = memoryview(buf)
    while len(view) - at >= LENGTH.size:
        length = frame_length(view[at:])
        end = at + LENGTH.size + length
        if end > len(view):
            break
        out.append(decode(view[at + LENGTH.size : end]))
        at = end
    return out, at


def _decode_json_header(header: bytes) -> Command:
    try:
        obj = _JSON_DECODER.decode(header.decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise FrameError(f"JSON header does not parse: {e}") from None
    if not isinstance(obj, dict):
        raise FrameError("JSON header is not an object")
    try:
        ext_raw = obj.pop("extFields", None)
        ext = None
        if ext_raw is not None:
            if not isinstance(ext_raw, dict):
                raise FrameError("extFields is not an object")
            ext = {k: v if type(v) is str else java_string(v)  # (JSON keys are strings)
                   for k, v in ext_raw.items() if v is not None}  # fmt: skip
        language = obj.pop("language", "JAVA")
        if isinstance(language, int):
            language = LANGUAGES[language] if 0 <= language < len(LANGUAGES) else "OTHER"
        remark = obj.pop("remark", None)
        obj.pop("serializeTypeCurrentRPC", None)
        return Command(
            code=int(obj.pop("code", 0)), opaque=int(obj.pop("opaque", 0)),
            flag=int(obj.pop("flag", 0)), ext=ext,
            remark=None if remark is None else str(remark),
            language=str(language) if language is not None else "OTHER",
            version=int(obj.pop("version", 0) or 0), serialize_type=JSON, extra=obj,
        )  # fmt: skip
    except (TypeError, ValueError) as e:
        if isinstance(e, FrameError):
            raise
        raise FrameError(f"JSON header has a bad field: {e}") from None


def _decode_binary_header(header: bytes) -> Command:
    try:
        code, lang, version, opaque, flag, remark_len = BINARY_FIXED.unpack_from(header, 0)
        at = BINARY_FIXED_SIZE
        remark = header[at : at + remark_len].decode() if remark_len > 0 else None
        at += max(remark_len, 0)
        (ext_len,) = INT32.unpack_from(header, at)
        at += INT32.size
        end = at + ext_len
        if ext_len < 0 or end > len(header):
            raise FrameError(f"extFields length {ext_len} exceeds the header")
        ext = _decode_ext(header, at, end) if ext_len else None
    except (struct.error, UnicodeDecodeError, IndexError) as e:
        raise FrameError(f"binary header does not decode: {e}") from None
    language = LANGUAGES[lang] if 0 <= lang < len(LANGUAGES) else "OTHER"
    return Command(code=code, opaque=opaque, flag=flag, ext=ext, remark=remark,
                   language=language, version=version, serialize_type=ROCKETMQ)  # fmt: skip


def _decode_ext(h: bytes, at: int, end: int) -> dict[str, str]:
    """The binary extFields in ``h[at:end]`` (the hot loop of every binary request: key
    lengths read as two bytes, bounds checked once at the end)."""
    ext = {}
    unpack = _INT32_AT
    vlen = 0
    while at < end:
        kend = at + 2 + (h[at] << 8 | h[at + 1])
        (vlen,) = unpack(h, kend)
        vat = kend + 4
        if vlen > 0:  # a zero-length value decodes as null
            ext[h[at + 2 : kend].decode()] = h[vat : vat + vlen].decode()
        elif vlen < 0:
            break
        at = vat + vlen
    if at != end:
        raise FrameError("extFields entries do not end where extLen says")
    return ext


# --- encoding ---------------------------------------------------------------------------------


def json_header(cmd: Command) -> bytes:
    """The JSON header as fastjson writes it: keys sorted, nulls left out."""
    ext, remark = cmd.ext, cmd.remark
    if ext is None or all(type(v) is str for v in ext.values()):
        # put together directly, then checked: the bytes ``_COMPACT_JSON`` writes when no
        # string held a quote, a backslash or a control character (tested), in a third of
        # the time (unprintable characters, which need no escaping, take the long way)
        quotes = 16 + (0 if ext is None else 2 + 4 * len(ext)) + (0 if remark is None else 4)
        fields = "" if ext is None else ",".join([f'"{k}":"{ext[k]}"' for k in sorted(ext)])
        text = (f'{{"code":{int(cmd.code)},'
                f'{"" if ext is None else f""""extFields":{{{fields}}},"""}'
                f'"flag":{int(cmd.flag)},"language":"{cmd.language}","opaque":{int(cmd.opaque)},'
                f'{"" if remark is None else f""""remark":"{remark}","""}'
                f'"serializeTypeCurrentRPC":"JSON","version":{int(cmd.version)}}}')  # fmt: skip
        if text.isprintable() and "\\" not in text and text.count('"') == quotes:
            return text.encode()
    obj: dict[str, Any] = {"code": cmd.code, "flag": cmd.flag, "language": cmd.language,
                           "opaque": cmd.opaque, "serializeTypeCurrentRPC": "JSON",
                           "version": cmd.version}  # fmt: skip
    if ext is not None:
        obj["extFields"] = {k: v if type(v) is str else java_string(v)
                            for k, v in ext.items() if v is not None}  # fmt: skip
    if remark is not None:
        obj["remark"] = remark
    return _COMPACT_JSON.encode(obj).encode()


def binary_header(cmd: Command) -> bytes:
    """RocketMQ's binary header (serialize type 1)."""
    remark = cmd.remark.encode() if cmd.remark else b""
    parts = [BINARY_FIXED.pack(cmd.code, _LANGUAGE_INDEX.get(cmd.language, 0), cmd.version,
                               cmd.opaque, cmd.flag, len(remark)), remark, b""]  # fmt: skip
    size = 0
    for k, v in (cmd.ext or {}).items():
        if v is None:
            continue
        kb = k.encode()
        vb = (v if type(v) is str else java_string(v)).encode()
        parts += (len(kb).to_bytes(2, "big"), kb, len(vb).to_bytes(4, "big"), vb)
        size += 6 + len(kb) + len(vb)
    parts[2] = size.to_bytes(4, "big")
    return b"".join(parts)


def encode(cmd: Command) -> bytes:
    """The whole frame, length field first, in ``cmd.serialize_type``."""
    if cmd.pieces:
        return b"".join((encode_head(cmd), cmd.body, *cmd.pieces))
    return encode_head(cmd) + cmd.body


def encode_head(cmd: Command) -> bytes:
    """The frame up to its body (length field, header word, header): ``encode`` is this
    followed by ``cmd.body`` and ``cmd.pieces``, for a writer that joins several frames into
    one write."""
    header = binary_header(cmd) if cmd.serialize_type == ROCKETMQ else json_header(cmd)
    length = HEADER_WORD.size + len(header) + len(cmd.body)
    if cmd.pieces:
        length += sum(map(len, cmd.pieces))
    if length > FRAME_MAX:
        raise FrameError(f"frame of {length} bytes exceeds {FRAME_MAX}")
    word = (cmd.serialize_type << 24) | len(header)
    return PREFIX.pack(length, word) + header


# --- JSON bodies --------------------------------------------------------------------------------


def json_body(value: Any) -> bytes:
    """A body as standard JSON (keys sorted, compact), which every client reads (spec §2)."""
    return _COMPACT_JSON.encode(value).encode()


def parse_json_body(body: bytes) -> Any:
    """A JSON body, read leniently: fastjson's bare integer map keys (``{0:"a"}``) are taken
    too. FrameError when it is not JSON."""
    try:
        return fastjson.loads(body.decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise FrameError(f"body is not JSON: {e}") from None


def message_queue_key(broker_name: str, queue_id: int, topic: str) -> str:
    """A ``MessageQueue`` map key as standard JSON carries it: the object as a string."""
    return json.dumps({"brokerName": broker_name, "queueId": queue_id, "topic": topic},
                      separators=(",", ":"))  # fmt: skip
