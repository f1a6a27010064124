"""Raw remoting frames over TCP for the tests: send bytes as the spec shows them, read the
answer frame by frame."""

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import struct

from rmqstore.formats import remoting as R


def json_request(code: int, ext: dict | None = None, opaque: int = 1, body: bytes = b"",
                 flag: int = 0, version: int = 409) -> bytes:  # fmt: skip
    """A request frame as a 4.9.8 Java client writes it (JSON header, keys sorted)."""
    header: dict = {"code": code, "flag": flag, "language": "JAVA", "opaque": opaque,
                    "serializeTypeCurrentRPC": "JSON", "version": version}  # fmt: skip
    if ext is not None:
        header["extFields"] = ext
    raw = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return struct.pack(">ii", 4 + len(raw) + len(body), len(raw)) + raw + body


async def read_frame(reader: asyncio.StreamReader) -> tuple[bytes, R.Command]:
    """One frame: its raw bytes and its decoding."""
    prefix = await reader.readexactly(4)
    rest = await reader.readexactly(R.frame_length(prefix))
    return prefix + rest, R.decode(rest)


class Wire:
    """One client connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, address: str) -> "Wire":
        host, _, port = address.rpartition(":")
        return cls(*await asyncio.open_connection(host, int(port)))

    async def call(self, frame: bytes) -> R.Command:
        self.writer.write(frame)
        return (await read_frame(self.reader))[1]

    async def answer(self, frame: bytes) -> R.Command:
        """The answer to ``frame``, past what the server asks of the client meanwhile (a
        heartbeat's NOTIFY_CONSUMER_IDS_CHANGED comes before its answer)."""
        self.writer.write(frame)
        while True:
            command = (await read_frame(self.reader))[1]
            if command.flag & R.FLAG_RESPONSE:
                return command

    async def call_raw(self, frame: bytes) -> bytes:
        self.writer.write(frame)
        return (await read_frame(self.reader))[0]

    async def closed(self) -> bool:
        """Whether the server closed the connection (EOF before any more bytes)."""
        return await self.reader.read(1) == b""

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


def signed(ext: dict[str, str], access_key: str, secret_key: str, body: bytes = b""
           ) -> dict[str, str]:  # fmt: skip
    """``ext`` with the two fields a 4.x client with credentials adds (RocketMQ's ACL):
    ``AccessKey``, and ``Signature``: Base64 HMAC-SHA1 of every other field's value in the
    order of the field names, then the body."""
    fields = {**ext, "AccessKey": access_key}
    content = "".join(fields[k] for k in sorted(fields)).encode() + body
    digest = hmac.new(secret_key.encode(), content, hashlib.sha1).digest()
    return {**fields, "Signature": base64.b64encode(digest).decode()}
