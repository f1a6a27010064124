"""Subscribe sends the writer's serialized batches as they are, however the generated code
registers the service."""

import pytest

from rmqstore.server import AsyncService, channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CommitLogEngine
from services.commitlog.servicer import CommitLogServicer, _Registrar, add_to_server


class _GenericOnly:
    """The server as generated code older than registered methods sees it: those calls are
    dropped, so only the generic handlers serve."""

    def __init__(self, registrar: _Registrar) -> None:
        self.registrar = registrar

    def add_generic_rpc_handlers(self, handlers) -> None:
        self.registrar.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(self, service_name, handlers) -> None:
        pass


@pytest.mark.parametrize("generic_only", [False, True])
def test_subscribers_get_every_put_as_dispatch_batches(tmp_path, generic_only):
    engine = CommitLogEngine(WriterConfig(store=tmp_path / "store", segment_size=1 << 20))
    service = AsyncService("127.0.0.1:0")
    servicer = CommitLogServicer(engine, None, service.run_blocking)
    if generic_only:
        registrar = _Registrar(service.server, servicer)
        commitlog_pb2_grpc.add_CommitLogServicer_to_server(servicer, _GenericOnly(registrar))
        assert registrar.swapped
    else:
        add_to_server(servicer, service.server)
    service.start()
    try:
        stub = commitlog_pb2_grpc.CommitLogStub(channel(service.address))
        sent = []
        for k in range(4):  # chunks of 10; batches of up to 25 join three of them
            batch = [common_pb2.Message(topic="T", body=b"x", keys=f"k{k}-{i}") for i in range(10)]
            sent += stub.PutBatch(commitlog_pb2.PutBatchRequest(messages=batch)).results
        stream = stub.Subscribe(
            commitlog_pb2.SubscribeRequest(subscriber="s", from_offset=0, max_batch_records=25)
        )
        batches = []
        for batch in stream:
            batches.append(batch)
            if batch.next_offset >= engine.max_offset:
                stream.cancel()
                break
    finally:
        service.stop(0)
        engine.close()
    assert [len(b.phy_offset) for b in batches] == [30, 10]
    assert [p for b in batches for p in b.phy_offset] == [r.phy_offset for r in sent]
    keys = [f"k{k}-{i}" for k in range(4) for i in range(10)]
    assert [k for b in batches for k in b.keys] == keys
    assert batches[0].next_offset == sent[30].phy_offset
