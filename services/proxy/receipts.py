"""Receipt handles the proxy hands out with each received message, and reads back on ack
and ChangeInvisibleDuration::

    <queue>:<offset>:<version>      a message of the topic received
    r:<queue>:<offset>:<version>    a message of the group's retry topic

``version`` is new on every delivery and every change of the invisible time: a handle of an
earlier one is stale."""

from rmqstore.rocketmq import definition_pb2 as pb
from services.proxy.status import BusinessError

RETRY_HANDLE = "r"  # a receipt handle's first field when it names the retry topic


def handle(queue: int, offset: int, version: int, retry: bool = False) -> str:
    text = f"{queue}:{offset}:{version}"
    return f"{RETRY_HANDLE}:{text}" if retry else text


def parse_handle(text: str) -> tuple[bool, int, int, int]:
    """(names the retry topic?, queue, offset, version)."""
    fields = text.split(":")
    retry = len(fields) == 4 and fields[0] == RETRY_HANDLE
    try:
        q, o, v = (int(x) for x in fields[retry:])
    except ValueError:
        raise BusinessError(
            pb.INVALID_RECEIPT_HANDLE, f"receipt handle {text!r} is malformed"
        ) from None
    return retry, q, o, v
