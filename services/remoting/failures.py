"""How a request whose handler failed is answered: what the broker answers SYSTEM_ERROR with
a remark, in one place for the handlers run as tasks (``Broker``) and the sends answered from
the appender's callback (``send.Sender.handle``)."""

import grpc

from rmqstore.appender import AppendError
from rmqstore.formats import remoting as R
from services.remoting import topics as T


def failure_answer(request: R.Command, e: BaseException) -> R.Command | None:
    """SYSTEM_ERROR with ``e``'s remark for a refusal or a store that cannot be reached; None
    for anything else (a bug: the connection logs it and answers "internal error")."""
    if isinstance(e, ValueError | R.FrameError | T.TopicError | AppendError):
        return R.response_to(request, R.ResponseCode.SYSTEM_ERROR, remark=str(e))
    if isinstance(e, grpc.aio.AioRpcError):
        return R.response_to(request, R.ResponseCode.SYSTEM_ERROR,
                             remark=f"store unavailable: {e.details()}")  # fmt: skip
    return None
