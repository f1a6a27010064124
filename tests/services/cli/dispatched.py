"""What a writer has stored, read back from its dispatch stream."""

from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc


def dispatched(address: str, from_offset: int = 0) -> list:
    """The writer's dispatch batches from ``from_offset`` to its end."""
    stub = commitlog_pb2_grpc.CommitLogStub(channel(address))
    end = stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset
    batches = []
    if end > from_offset:
        request = commitlog_pb2.SubscribeRequest(subscriber="test", from_offset=from_offset)
        for batch in stub.Subscribe(request):
            batches.append(batch)
            if batch.next_offset >= end:
                break
    return batches
