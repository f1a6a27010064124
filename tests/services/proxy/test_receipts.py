import pytest

from rmqstore.rocketmq import definition_pb2 as pb
from services.proxy.receipts import handle, parse_handle
from services.proxy.status import BusinessError


@pytest.mark.parametrize("retry", [False, True])
def test_a_handle_reads_back(retry):
    assert parse_handle(handle(3, 1_000_000_007, 42, retry)) == (retry, 3, 1_000_000_007, 42)


@pytest.mark.parametrize("text", ["", "1:2", "x:1:2:3", "1:2:three", "r:1:2"])
def test_a_malformed_handle_is_refused_with_its_code(text):
    with pytest.raises(BusinessError) as e:
        parse_handle(text)
    assert e.value.code == pb.INVALID_RECEIPT_HANDLE
