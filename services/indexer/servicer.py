"""gRPC face of a builder: ``Builder.GetProgress`` from the builder's counters, nothing else."""

from rmqstore.server import grpc_errors
from rmqstore.v1 import indexer_pb2, indexer_pb2_grpc
from services.indexer.subscriber import Subscriber


class BuilderServicer(indexer_pb2_grpc.BuilderServicer):
    def __init__(self, subscriber: Subscriber) -> None:
        self.subscriber = subscriber

    @grpc_errors
    def GetProgress(self, request, context):
        s = self.subscriber
        b = s.builder
        return indexer_pb2.Progress(
            name=b.name,
            durable_offset=b.durable_offset,
            built_offset=b.built_offset,
            writer_max_offset=s.writer_max_offset,
            entries=b.entries,
            files=b.files,
            connected=s.connected,
        )
