"""The writer's role at runtime: a slave's follower, or a master's replication, delayed
delivery and retention; ``promote`` turns a slave into a master without a restart.

Promotion (``rmqstore admin promote``, the writer's ``Promote`` call):

1. refused unless this writer is a slave, and while its master's HA port still answers
   (two masters would take puts for one history) unless forced;
2. the HA listener starts on the writer's ``--ha-port`` (or the one asked for; a port in
   use refuses the promotion with nothing changed);
3. the follower stops (a record received in part is dropped: it was never acknowledged),
   and so does the copy of the master's configuration (``config_copy``);
4. a new master term and a new writer epoch begin at this store's end (``terms.py``): a
   former master that rejoins as a slave cuts its log there;
5. the new role is kept in the store (``promoted``): a restart with the slave's command line
   starts this master again;
6. delayed delivery and retention start, and puts are taken.

Bytes a synchronous master answered ``PUT_OK`` for were in this slave's files before the
answer went out, so they are all below the new term's start.
"""

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from rmqstore.errors import StoreError
from rmqstore.v1 import commitlog_pb2
from services.commitlog import promoted
from services.commitlog.config import ASYNC_MASTER, SYNC_MASTER, WriterConfig, master_address
from services.commitlog.config_copy import ConfigCopy
from services.commitlog.delivery import DeliveryService
from services.commitlog.engine import CommitLogEngine
from services.commitlog.ha_master import Replication
from services.commitlog.ha_slave import HaSlave
from services.commitlog.observe import WriterObserver
from services.commitlog.retention import Retention

log = logging.getLogger(__name__)
PROBE_TIMEOUT_S = 2.0


class PromoteRefusedError(StoreError):
    """The writer cannot be promoted now; nothing changed."""

    grpc_status = "FAILED_PRECONDITION"


def master_answers(ha_master: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether something accepts TCP connections on the master's HA port."""
    try:
        with socket.create_connection(master_address(ha_master), timeout=timeout):
            return True
    except OSError:
        return False


def replication_for(engine: CommitLogEngine, config: WriterConfig, role: str = ""
                    ) -> Replication:  # fmt: skip
    return Replication(engine, role or config.role, config.slave_timeout_s,
                       config.slave_fallbehind_max, config.min_sync_replicas,
                       config.ha_idle_s)  # fmt: skip


class Roles:
    """What runs besides the engine, by role; the servicer and the shutdown read it here."""

    def __init__(
        self, engine: Any, host: str, observer: WriterObserver,
        run_blocking: Callable[..., Awaitable[Any]],
        slave: HaSlave | None = None, replication: Replication | None = None,
        delivery: DeliveryService | None = None, retention: Retention | None = None,
    ) -> None:  # fmt: skip
        self.engine = engine
        self.host = host
        self.observer = observer
        self.run_blocking = run_blocking
        self.slave = slave
        self.replication = replication
        self.delivery = delivery
        self.retention = retention
        self.config_copy: ConfigCopy | None = None  # a slave's copy of its master's config/
        self.on_change: list[Callable[[Roles], None]] = []  # e.g. the servicer's references
        self._promoting = asyncio.Lock()

    async def promote(self, request: commitlog_pb2.PromoteRequest) -> commitlog_pb2.PromoteResult:
        role = request.role or ASYNC_MASTER
        if role not in (ASYNC_MASTER, SYNC_MASTER):
            raise PromoteRefusedError(f"a promoted writer is {ASYNC_MASTER} or {SYNC_MASTER}, "
                                      f"not {role!r}")  # fmt: skip
        async with self._promoting:
            e = self.engine
            if not isinstance(e, CommitLogEngine) or not e.config.is_slave or self.slave is None:
                raise PromoteRefusedError(
                    f"this writer is {e.config.role if not e.read_only else 'read-only'}, not a "
                    "slave: only a slave can be promoted")  # fmt: skip
            former = e.config.ha_master
            ha_port = request.ha_port or e.config.ha_port
            if not ha_port:
                raise PromoteRefusedError("no HA port to take slaves on: give one (--ha-port) "
                                          "or start the writer with --ha-port")  # fmt: skip
            if not request.force and await self.run_blocking(master_answers, former):
                raise PromoteRefusedError(
                    f"the master {former} still answers on its HA port: promoting this slave "
                    "would make two masters of one history. Stop the master first, or promote "
                    "with --force if it is unusable although its port answers")  # fmt: skip
            replication = replication_for(e, e.config, role)
            try:  # before anything changes: a port in use refuses the promotion
                await replication.listen(self.host, ha_port)
            except OSError as err:
                raise PromoteRefusedError(f"cannot listen on the HA port {self.host}:{ha_port}: "
                                          f"{err}") from None  # fmt: skip
            slave = self.slave
            await self.run_blocking(slave.close)
            if self.config_copy is not None:  # the master's config/ is this writer's now
                await self.run_blocking(self.config_copy.close)
                self.config_copy = None
            if slave.replica.pending:
                log.info("dropping %d bytes of a record received in part from %s",
                         len(slave.replica.pending), former)  # fmt: skip
            term, start, epoch = e.become_master(role, ha_port)
            try:  # a restart with the slave's command line starts this master again
                promoted.record(e.layout, promoted.Promoted(role, replication.port, former,
                                                            term))  # fmt: skip
            except OSError as err:
                log.error("promoted, but the role could not be kept (%s): restarted as a "
                          "slave, this writer would follow %s again", err, former)  # fmt: skip
            delivery = None
            try:
                delivery = DeliveryService(e) if e.config.delivery else None
            except StoreError as err:  # promoted all the same: puts matter more
                log.error("promoted, but delayed delivery cannot start: %s; delayed messages "
                          "stay in the schedule topic until the writer restarts", err)  # fmt: skip
            retention = Retention(e)
            self.slave, self.replication = None, replication
            self.delivery, self.retention = delivery, retention
            self.observer.promoted(delivery, retention, replication)
            for hook in self.on_change:
                hook(self)
            if delivery is not None:
                delivery.start()
            retention.start()
            log.warning("promoted: no longer a slave of %s; %s from offset %d (master term %d, "
                        "writer epoch %d), slaves connect to %s:%d", former, role, start, term,
                        epoch, self.host, replication.port)  # fmt: skip
            return commitlog_pb2.PromoteResult(
                term=term, start_offset=start, epoch=epoch, role=role, ha_port=replication.port,
                former_master=former)  # fmt: skip
