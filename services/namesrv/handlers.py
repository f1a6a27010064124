"""The name server's answers to remoting requests (``spec/rocketmq-remoting.md`` §3.1): each
request code to one function over the ``RouteTable``. All of them answer at once (nothing
here waits), so the connection serves them inline."""

import logging
import zlib
from collections.abc import Callable

from rmqstore.formats import remoting as R
from rmqstore.remoting_net import Connection, not_supported
from services.namesrv.routes import RouteTable, data_version, topic_configs

log = logging.getLogger("rmqstore.namesrv")
C = R.RequestCode
RC = R.ResponseCode
FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def _required(req: R.Command, *names: str) -> list[str] | R.Command:
    """The named extFields, or the error answer naming the first one missing."""
    values = []
    for name in names:
        value = req.field(name)
        if value is None:
            return R.response_to(req, RC.SYSTEM_ERROR,
                                 remark=f"the custom field <{name}> is null")  # fmt: skip
        values.append(value)
    return values


def _long(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"the custom field <{name}> is not a number: {value!r}") from None


class NameServer:
    """What answers the requests of one name server process."""

    def __init__(self, table: RouteTable) -> None:
        self.table = table
        self.handlers: dict[int, Callable[[Connection, R.Command], R.Command]] = {
            C.REGISTER_BROKER: self.register_broker,
            C.UNREGISTER_BROKER: self.unregister_broker,
            C.GET_ROUTEINFO_BY_TOPIC: self.route,
            C.GET_BROKER_CLUSTER_INFO: self.cluster_info,
            C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.all_topics,
            C.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            C.GET_TOPICS_BY_CLUSTER: self.topics_by_cluster,
            C.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.system_topics,
            C.QUERY_DATA_VERSION: self.query_data_version,
            C.PUT_KV_CONFIG: self.put_kv,
            C.GET_KV_CONFIG: self.get_kv,
            C.DELETE_KV_CONFIG: self.delete_kv,
            C.GET_KVLIST_BY_NAMESPACE: self.kv_list,
            C.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            C.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
        }

    def __call__(self, conn: Connection, req: R.Command) -> R.Command:
        handler = self.handlers.get(req.code)
        if handler is None:
            return not_supported(req)
        try:
            return handler(conn, req)
        except (ValueError, R.FrameError) as e:
            return R.response_to(req, RC.SYSTEM_ERROR, remark=str(e))

    def connection_closed(self, conn: Connection) -> None:
        for addr in self.table.connection_closed(conn):
            log.info("broker %s dropped: its connection closed", addr)

    # --- brokers ---------------------------------------------------------------------------

    def register_broker(self, conn: Connection, req: R.Command) -> R.Command:
        got = _required(req, "brokerName", "brokerAddr", "clusterName", "haServerAddr",
                        "brokerId")  # fmt: skip
        if isinstance(got, R.Command):
            return got
        name, addr, cluster, ha_addr, broker_id = got
        crc = int(req.field("bodyCrc32", "0") or 0)
        if crc and zlib.crc32(req.body) & 0x7FFFFFFF != crc:  # RocketMQ's UtilAll.crc32
            return R.response_to(req, RC.SYSTEM_ERROR, remark="crc32 not match")
        if req.field("compressed") == "true":
            return R.response_to(req, RC.SYSTEM_ERROR,
                                 remark="compressed registration is not supported")  # fmt: skip
        body = R.parse_json_body(req.body) if req.body else None
        timeout_ms = req.field("heartbeatTimeoutMillis")  # RocketMQ 5's; 4.x brokers send none
        timeout_s = None
        if timeout_ms:
            timeout_s = _long(timeout_ms, "heartbeatTimeoutMillis") / 1000
            if timeout_s <= 0:
                raise ValueError(f"the custom field <heartbeatTimeoutMillis> is not positive: "
                                 f"{timeout_ms}")  # fmt: skip
        result = self.table.register(cluster, addr, name, _long(broker_id, "brokerId"), ha_addr,
                                     topic_configs(body), conn, data_version(body),
                                     timeout_s)  # fmt: skip
        ext = {}
        if result.ha_server_addr is not None:
            ext["haServerAddr"] = result.ha_server_addr
        if result.master_addr is not None:
            ext["masterAddr"] = result.master_addr
        return R.response_to(req, ext=ext)

    def unregister_broker(self, conn: Connection, req: R.Command) -> R.Command:
        got = _required(req, "brokerName", "brokerAddr", "clusterName", "brokerId")
        if isinstance(got, R.Command):
            return got
        name, addr, cluster, broker_id = got
        self.table.unregister(cluster, addr, name, _long(broker_id, "brokerId"))
        log.info("broker %s (%s) unregistered", addr, name)
        return R.response_to(req, ext={})

    def query_data_version(self, conn: Connection, req: R.Command) -> R.Command:
        got = _required(req, "brokerAddr")
        if isinstance(got, R.Command):
            return got
        version = R.parse_json_body(req.body) if req.body else None
        live = self.table.live.get(got[0])
        changed = self.table.data_version_changed(got[0], version)
        body = R.json_body(live.data_version) if live and live.data_version else b""
        return R.response_to(req, ext={"changed": "true" if changed else "false"}, body=body)

    def wipe_write_perm(self, conn: Connection, req: R.Command) -> R.Command:
        return self._write_perm(req, False, "wipeTopicCount")

    def add_write_perm(self, conn: Connection, req: R.Command) -> R.Command:
        return self._write_perm(req, True, "addTopicCount")

    def _write_perm(self, req: R.Command, writable: bool, count_name: str) -> R.Command:
        got = _required(req, "brokerName")
        if isinstance(got, R.Command):
            return got
        count = self.table.change_write_perm(got[0], writable)
        return R.response_to(req, ext={count_name: str(count)})

    # --- routes and topics -------------------------------------------------------------------

    def route(self, conn: Connection, req: R.Command) -> R.Command:
        got = _required(req, "topic")
        if isinstance(got, R.Command):
            return got
        route = self.table.route(got[0])
        if route is None:
            return R.response_to(req, RC.TOPIC_NOT_EXIST, remark=(
                f"No topic route info in name server for the topic: {got[0]}{FAQ}"))  # fmt: skip
        return R.response_to(req, body=R.json_body(route))

    def cluster_info(self, conn: Connection, req: R.Command) -> R.Command:
        return R.response_to(req, body=R.json_body(self.table.cluster_info()))

    def all_topics(self, conn: Connection, req: R.Command) -> R.Command:
        return R.response_to(req, body=R.json_body({"topicList": self.table.topic_list()}))

    def topics_by_cluster(self, conn: Connection, req: R.Command) -> R.Command:
        got = _required(req, "cluster")
        if isinstance(got, R.Command):
            return got
        topics = self.table.topics_of_cluster(got[0])
        return R.response_to(req, body=R.json_body({"topicList": topics}))

    def system_topics(self, conn: Connection, req: R.Command) -> R.Command:
        topics, master = self.table.system_topics()
        body: dict[str, object] = {"topicList": topics}
        if master is not None:
            body["brokerAddr"] = master
        return R.response_to(req, body=R.json_body(body))

    def delete_topic(self, conn: Connection, req: R.Command) -> R.Command:
        got = _required(req, "topic")
        if isinstance(got, R.Command):
            return got
        self.table.delete_topic(got[0], req.field("clusterName"))
        return R.response_to(req, ext={})

    # --- KV configuration --------------------------------------------------------------------

    def put_kv(self, conn: Connection, req: R.Command) -> R.Command:
        got = _required(req, "namespace", "key", "value")
        if isinstance(got, R.Command):
            return got
        self.table.put_kv(*got)
        return R.response_to(req, ext={})

    def get_kv(self, conn: Connection, req: R.Command) -> R.Command:
        got = _required(req, "namespace", "key")
        if isinstance(got, R.Command):
            return got
        value = self.table.get_kv(*got)
        if value is None:
            return R.response_to(
                req,
                RC.QUERY_NOT_FOUND,
                ext={},
                remark=f"No config item, Namespace: {got[0]} Key: {got[1]}",
            )
        return R.response_to(req, ext={"value": value})

    def delete_kv(self, conn: Connection, req: R.Command) -> R.Command:
        got = _required(req, "namespace", "key")
        if isinstance(got, R.Command):
            return got
        self.table.delete_kv(*got)
        return R.response_to(req, ext={})

    def kv_list(self, conn: Connection, req: R.Command) -> R.Command:
        got = _required(req, "namespace")
        if isinstance(got, R.Command):
            return got
        table = self.table.kv_list(got[0])
        if table is None:
            return R.response_to(req, RC.QUERY_NOT_FOUND,
                                 remark=f"No config item, Namespace: {got[0]}")  # fmt: skip
        return R.response_to(req, body=R.json_body({"table": table}))
