import asyncio

import pytest

from rmqstore.formats import remoting as R
from rmqstore.name_servers import NameServerError, NameServers, masters


def test_masters_of_a_cluster_from_fastjsons_numeric_ids():
    info = R.parse_json_body(
        b'{"brokerAddrTable":{"a":{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}},'
        b'"b":{"brokerAddrs":{1:"10.0.0.3:10911"}},"c":{"brokerAddrs":{"0":"10.0.0.4:10911"}}},'
        b'"clusterAddrTable":{"C":["a","b"],"D":["c"]}}'
    )
    assert masters(info, "C") == {"a": "10.0.0.1:10911"}  # b has no master registered
    assert masters(info, "D") == {"c": "10.0.0.4:10911"}
    assert masters(info, "E") == {}


def test_no_name_server_answering_is_one_error_naming_each():
    async def ask() -> None:
        ns = NameServers(["127.0.0.1:1", "127.0.0.1:2"], timeout_s=1)
        try:
            await ns.cluster_info()
        finally:
            await ns.close()

    with pytest.raises(NameServerError, match="127.0.0.1:1.*127.0.0.1:2"):
        asyncio.run(ask())
