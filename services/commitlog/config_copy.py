"""A slave copies its master's configuration every 10 s, as RocketMQ's slave does over its
admin protocol; here over the master writer's gRPC ``GetConfig`` (``--ha-master-commitlog``).

Each file keeps its one writer:

* ``config/topics.json`` — the writer's: replaced by the master's (the slave's own topics
  are the master's, copied in its records);
* ``config/delayOffset.json`` — the writer's (a slave runs no delayed delivery): each
  level's offset is the higher of the slave's and the master's, so a promoted slave's
  delivery never goes back and delivers again;
* ``config/consumerOffset.json`` and ``config/subscriptionGroup.json`` belong to the proxy,
  which keeps them in memory: the writer keeps the master's copies in
  ``rmqstore/replica-config/`` instead (offsets merged, each queue's the higher seen), and
  the proxy takes them in when it starts (``services/proxy/progress.py``): consumer
  progress only ever moves forward, never back to an older copy;
* ``config/brokerPermission.json`` — the writer's: set to the master's, so a drained broker
  group stays drained when its slave is promoted.
"""

import logging
import threading
from collections.abc import Callable

import grpc

from rmqstore import broker_perm, durable
from rmqstore.errors import StoreError
from rmqstore.formats import consumer_offsets, delay_offset, topics_json
from rmqstore.layout import StoreLayout
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc
from services.commitlog.topics import TopicStore

log = logging.getLogger(__name__)
TOPICS, DELAY, OFFSETS, GROUPS, PERM = (
    "topics.json", "delayOffset.json", "consumerOffset.json", "subscriptionGroup.json",
    broker_perm.FILE)
FILES = (TOPICS, DELAY, OFFSETS, GROUPS, PERM)
INTERVAL_S = 10.0
RPC_TIMEOUT_S = 5.0


def read_config(layout: StoreLayout) -> dict[str, bytes]:
    """``GetConfig``'s answer: the files of ``config/`` there are."""
    out = {}
    for name in FILES:
        try:
            out[name] = (layout.root / "config" / name).read_bytes()
        except FileNotFoundError:
            continue
    return out


def _read(path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def merge_offsets(mine: consumer_offsets.OffsetTable, theirs: consumer_offsets.OffsetTable
                  ) -> consumer_offsets.OffsetTable:  # fmt: skip
    """Each queue's higher committed offset of the two tables."""
    out = consumer_offsets.OffsetTable(
        {k: dict(v) for k, v in mine.offsets.items()}, theirs.data_version or mine.data_version)
    for k, queues in theirs.offsets.items():
        have = out.offsets.setdefault(k, {})
        for q, o in queues.items():
            if have.get(q, -1) < o:
                have[q] = o
    return out


class ConfigCopy:
    """Copies the master's configuration every ``interval_s`` until ``close``."""

    def __init__(self, layout: StoreLayout, topic_store: TopicStore, master_commitlog: str,
                 interval_s: float = INTERVAL_S,
                 open_channel: Callable[[str], grpc.Channel] = channel,
                 permission: broker_perm.PermissionFile | None = None) -> None:  # fmt: skip
        self.open_channel = open_channel  # TLS when the writer's flags configure it
        self.layout = layout
        self.topics = topic_store
        self.permission = permission
        self.address = master_commitlog
        self.interval_s = interval_s
        self.copies = 0
        self.last_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="config-copy", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _run(self) -> None:
        with self.open_channel(self.address) as ch:
            stub = commitlog_pb2_grpc.CommitLogStub(ch)
            while not self._stop.is_set():
                try:
                    files = stub.GetConfig(commitlog_pb2.GetConfigRequest(),
                                           timeout=RPC_TIMEOUT_S).files  # fmt: skip
                    self.apply(dict(files))
                    self.copies += 1
                    self.last_error = ""
                except (grpc.RpcError, ValueError, StoreError, OSError) as e:
                    why = (f"{e.code()}: {e.details()}" if isinstance(e, grpc.Call) else str(e))
                    if why != self.last_error:
                        log.warning("cannot copy the master's configuration from %s: %s; "
                                    "retrying every %g s", self.address, why,
                                    self.interval_s)  # fmt: skip
                    self.last_error = why
                self._stop.wait(self.interval_s)

    def apply(self, files: dict[str, bytes]) -> None:
        """Take in the master's files (see the module's description)."""
        config = self.layout.root / "config"
        if TOPICS in files:
            self.topics.replace(topics_json.parse(files[TOPICS].decode()))
        if DELAY in files:
            mine = delay_offset.decode(_read(config / DELAY)) if (config / DELAY).exists() else {}
            theirs = delay_offset.decode(files[DELAY].decode())
            merged = {**mine, **{lv: max(o, mine.get(lv, 0)) for lv, o in theirs.items()}}
            if merged != mine:
                durable.replace_file(config / DELAY, delay_offset.encode(merged).encode())
        replica = self.layout.replica_config_dir
        if OFFSETS in files:
            mine_text = _read(replica / OFFSETS)
            merged_offsets = merge_offsets(consumer_offsets.parse(mine_text),
                                           consumer_offsets.parse(files[OFFSETS].decode()))
            text = consumer_offsets.render(merged_offsets)
            if text != mine_text:
                durable.replace_file(replica / OFFSETS, text.encode())
        if GROUPS in files and _read(replica / GROUPS).encode() != files[GROUPS]:
            durable.replace_file(replica / GROUPS, files[GROUPS])
        if self.permission is not None:  # no file there: never drained, read-write
            self.permission.set(broker_perm.decode(files[PERM]) if PERM in files
                                else broker_perm.READ_WRITE)  # fmt: skip
