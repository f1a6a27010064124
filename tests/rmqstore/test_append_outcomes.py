"""How a writer's stream reply becomes a put's outcome, and a ``submit``'s waiter settles."""

import grpc

from rmqstore.append_outcomes import (
    BUSY,
    REFUSED,
    UNAVAILABLE,
    AppendError,
    Stored,
    Waiter,
    reply_outcome,
)
from rmqstore.v1 import commitlog_pb2


def test_a_reply_is_its_response_or_the_refusal_its_status_says():
    ok = commitlog_pb2.PutStreamReply(response={"columns": {"phy_offset": [7]}})
    assert list(reply_outcome(ok).columns.phy_offset) == [7]
    bad = reply_outcome(commitlog_pb2.PutStreamReply(
        status_code=grpc.StatusCode.INVALID_ARGUMENT.value[0], error="queue id 9"))  # fmt: skip
    assert isinstance(bad, AppendError) and bad.kind == REFUSED and str(bad) == "queue id 9"
    down = reply_outcome(commitlog_pb2.PutStreamReply(
        status_code=grpc.StatusCode.INTERNAL.value[0]))  # fmt: skip
    assert isinstance(down, AppendError) and down.kind == UNAVAILABLE
    full = reply_outcome(commitlog_pb2.PutStreamReply(  # as a unary call's: busy, not down
        status_code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], error="disk full"))  # fmt: skip
    assert isinstance(full, AppendError) and full.kind == BUSY and str(full) == "disk full"


def test_a_waiter_settles_once_and_counts_its_put_out_first():
    calls: list = []
    waiter = Waiter(lambda sender, before: calls.append(("left", sender, before)), "s1",
                    lambda results, error: calls.append((results, error)))  # fmt: skip
    waiter.before = 2
    assert not waiter.done()
    waiter.set_result([Stored(1, 2)])
    waiter.set_exception(RuntimeError("late"))  # settled already: ignored
    assert waiter.done()
    assert calls == [("left", "s1", 2), ([Stored(1, 2)], None)]
    failing = Waiter(lambda *_: None, "", lambda *_: 1 / 0)  # a caller's bug is logged only
    failing.set_exception(RuntimeError("x"))
    assert failing.done()
