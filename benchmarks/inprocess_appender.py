"""An ``Appender`` that appends in its own process, for ``noop_remoting --append-in-process``:
the front end's batching as it is, each batch appended by a commitlog writer engine running in
the same process (same engine, same servicer code as ``services.commitlog``, asynchronous
flush, no builders) instead of being written to a writer process's put socket. What a send
costs when it is stored with no hop at all: the ceiling of any front end that stores with this
append path, whatever the process layout.
"""

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc

from rmqstore import metrics
from rmqstore.appender import Appender
from rmqstore.put_socket import PutConnection
from rmqstore.v1 import commitlog_pb2
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CommitLogEngine
from services.commitlog.observe import WriterObserver
from services.commitlog.servicer import CommitLogServicer

SEGMENT_SIZE = 256 << 20


class InProcess(PutConnection):
    """A put-socket connection whose requests are appended when written: their replies are
    the servicer's, serialized as the socket would carry them."""

    def __init__(self, servicer: CommitLogServicer) -> None:
        super().__init__()
        self._servicer = servicer

    def _answers(self, requests: Sequence[commitlog_pb2.PutBatchRequest]) -> list[bytes]:
        out = []
        for r in requests:
            reply = self._servicer.answer_put(r)
            assert isinstance(reply, commitlog_pb2.PutStreamReply)  # asynchronous flush
            out.append(reply.SerializeToString())
        return out

    async def write(self, request: commitlog_pb2.PutBatchRequest) -> None:
        self._replies.extend(self._answers([request]))

    async def write_many(self, requests: Sequence[commitlog_pb2.PutBatchRequest]) -> None:
        self._replies.extend(self._answers(requests))

    def idle(self) -> bool:
        return self._expected is None and not self._replies

    def send(self, requests: Sequence[commitlog_pb2.PutBatchRequest],
             replied: Callable[[list[bytes] | None], None]) -> None:  # fmt: skip
        replies = self._answers(requests)
        self._expected = (len(requests), replied)
        asyncio.get_running_loop().call_soon(self._settle, replies)

    def _settle(self, replies: list[bytes]) -> None:
        expected, self._expected = self._expected, None
        assert expected is not None
        expected[1](replies)

    def cancel(self) -> None:
        pass


class InProcessAppender(Appender):
    """``Appender`` whose streams append into the store at ``store`` in this process."""

    def __init__(self, store: str, slots: int, linger_s: float, gather_s: float,
                 merge_below: int) -> None:  # fmt: skip
        super().__init__(grpc.aio.insecure_channel("127.0.0.1:1"), slots=slots, put_socket="-",
                         linger_s=linger_s, gather_s=gather_s, merge_below=merge_below)
        self.engine = CommitLogEngine(WriterConfig(store=Path(store), segment_size=SEGMENT_SIZE))
        observer = WriterObserver(self.engine, metrics.new_registry("commitlog"))  # as served
        self._servicer = CommitLogServicer(self.engine, observer, asyncio.to_thread)

    async def _open(self) -> InProcess:
        return InProcess(self._servicer)

    async def close(self) -> None:
        await super().close()
        self.engine.close()
