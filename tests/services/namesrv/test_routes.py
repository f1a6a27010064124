"""The name server's tables: registration merges, expiry after 120 s (a fake clock), routes."""

from services.namesrv.routes import RouteTable, topic_configs


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _config(queues: int, perm: int = 6) -> dict:
    return {"perm": perm, "readQueueNums": queues, "writeQueueNums": queues, "order": False,
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0}  # fmt: skip


def _table() -> tuple[RouteTable, Clock]:
    clock = Clock()
    table = RouteTable(clock)
    table.register("DefaultCluster", "127.0.0.1:10911", "broker-a", 0, "127.0.0.1:10912",
                   {"CapT": _config(4), "TBW102": _config(8, 7)}, conn := object())  # fmt: skip
    del conn
    return table, clock


def test_route_as_the_spec_shows() -> None:
    table, _ = _table()
    assert table.route("CapT") == {
        "brokerDatas": [{"brokerAddrs": {"0": "127.0.0.1:10911"}, "brokerName": "broker-a",
                         "cluster": "DefaultCluster"}],
        "filterServerTable": {},
        "queueDatas": [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 4,
                        "topicSysFlag": 0, "writeQueueNums": 4}],
    }  # fmt: skip
    assert table.route("Nope") is None


def test_incremental_registration_merges() -> None:
    table, _ = _table()
    table.register("DefaultCluster", "127.0.0.1:10911", "broker-a", 0, "", {"New": _config(2)})
    assert table.topic_list() == ["CapT", "New", "TBW102"]


def test_slave_registration_adds_no_topics_and_learns_its_master() -> None:
    table, _ = _table()
    result = table.register("DefaultCluster", "127.0.0.2:10911", "broker-a", 1, "127.0.0.2:1",
                            {"SlaveOnly": _config(1)})  # fmt: skip
    assert result.master_addr == "127.0.0.1:10911"
    assert result.ha_server_addr == "127.0.0.1:10912"
    assert "SlaveOnly" not in table.topic_list()
    assert table.cluster_info()["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {
        "0": "127.0.0.1:10911", "1": "127.0.0.2:10911"}  # fmt: skip


def test_broker_expires_after_120_s_without_registration() -> None:
    table, clock = _table()
    clock.now += 120
    assert table.expire() == []
    clock.now += 0.5
    assert table.expire() == ["127.0.0.1:10911"]
    assert table.route("CapT") is None and table.topic_list() == []
    assert table.cluster_info() == {"brokerAddrTable": {}, "clusterAddrTable": {}}


def test_a_broker_giving_its_own_timeout_expires_after_it() -> None:
    table, clock = _table()  # broker-a gives none: 120 s
    table.register("DefaultCluster", "127.0.0.1:20911", "broker-b", 0, "",
                   {"CapT": _config(4)}, object(), None, 20.0)  # fmt: skip
    clock.now += 20
    assert table.expire() == []
    clock.now += 0.5
    assert table.expire() == ["127.0.0.1:20911"]
    assert [q["brokerName"] for q in table.route("CapT")["queueDatas"]] == ["broker-a"]
    clock.now += 100
    assert table.expire() == ["127.0.0.1:10911"]


def test_reregistration_keeps_a_broker_alive() -> None:
    table, clock = _table()
    for _ in range(10):
        clock.now += 30
        table.register("DefaultCluster", "127.0.0.1:10911", "broker-a", 0, "", None)
        assert table.expire() == []
    assert table.route("CapT") is not None


def test_unregister_and_closed_connection_drop_the_broker() -> None:
    table, _ = _table()
    table.unregister("DefaultCluster", "127.0.0.1:10911", "broker-a", 0)
    assert table.topic_list() == [] and table.cluster_info()["clusterAddrTable"] == {}
    conn = object()
    table.register("C", "h:1", "b", 0, "", {"T": _config(1)}, conn)
    assert table.connection_closed(object()) == []
    assert table.connection_closed(conn) == ["h:1"]
    assert table.route("T") is None


def test_two_brokers_one_topic_and_delete() -> None:
    table, _ = _table()
    table.register("DefaultCluster", "127.0.0.3:10911", "broker-b", 0, "", {"CapT": _config(2)})
    route = table.route("CapT")
    assert route is not None
    assert [q["brokerName"] for q in route["queueDatas"]] == ["broker-a", "broker-b"]
    assert [b["brokerName"] for b in route["brokerDatas"]] == ["broker-a", "broker-b"]
    assert table.topics_of_cluster("DefaultCluster") == ["CapT", "TBW102"]
    assert table.system_topics() == (["DefaultCluster", "broker-a", "broker-b"],
                                     "127.0.0.1:10911")  # fmt: skip
    assert table.change_write_perm("broker-b", False) == 1
    assert table.route("CapT")["queueDatas"][1]["perm"] == 4  # type: ignore[index]
    table.delete_topic("CapT")
    assert table.route("CapT") is None


def test_topic_configs_of_a_registration_body() -> None:
    body = {
        "filterServerList": [],
        "topicConfigSerializeWrapper": {
            "dataVersion": {"counter": 0, "timestamp": 1},
            "topicConfigTable": {"T": _config(1)},
        },
    }
    assert topic_configs(body) == {"T": _config(1)}
    assert topic_configs({}) == {} and topic_configs([]) == {}
