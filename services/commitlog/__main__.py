"""``python -m services.commitlog``: run the commitlog writer."""

import argparse
import functools
import logging
import sys
from collections.abc import Callable
from pathlib import Path

import grpc

from rmqstore import delay, metrics, put_socket, store_shape, tls
from rmqstore.broker_perm import PermissionFile
from rmqstore.errors import StoreError, StoreLockedError
from rmqstore.layout import StoreLayout
from rmqstore.preflight import preflight
from rmqstore.server import AsyncService, configure_logging
from rmqstore.startup import StartupError, run_main
from rmqstore.v1 import commitlog_pb2, topics_pb2
from services.commitlog import declared_topics, ha_slave, peers, promoted, topics
from services.commitlog.config import (
    DEFAULT_SEGMENT_SIZE,
    WriterConfig,
    add_background_flags,
    add_replication_flags,
)
from services.commitlog.config_copy import ConfigCopy
from services.commitlog.delivery import DeliveryService
from services.commitlog.dispatching import LINGER_BELOW
from services.commitlog.engine import CommitLogEngine
from services.commitlog.ha_master import Replication
from services.commitlog.ha_slave import HaSlave
from services.commitlog.observe import WriterObserver
from services.commitlog.promotion import Roles, replication_for
from services.commitlog.read_only import ReadOnlyStore
from services.commitlog.rejoin import LateCheck, MasterUnknown, rejoin
from services.commitlog.retention import Retention
from services.commitlog.servicer import CommitLogServicer, add_to_server
from services.commitlog.terms import NewerThanMaster, Terms

log = logging.getLogger("rmqstore.commitlog")
REJOIN_DEADLINE_S = 5.0  # at start-up, a slave waits this long for its master's writer


def add_store_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--commitlog-segment-size", type=int, default=None,
                   help="default: the size of the store's segment files, else "
                        f"{DEFAULT_SEGMENT_SIZE} (a value that disagrees with the files is "
                        "refused)")
    p.add_argument("--read-only", action="store_true",
                   help="serve reads from an existing store without writing a byte into it "
                        "(no lock, abort, checkpoint or rmqstore/ made; puts refused)")
    p.add_argument("--flush", choices=("async", "sync"), default="async")
    p.add_argument("--flush-interval-ms", type=int, default=500)
    p.add_argument("--max-message-size", type=int, default=4 * 1024 * 1024)
    p.add_argument("--queues-per-topic", type=int, default=8)
    p.add_argument(
        "--store-host",
        default="127.0.0.1:10911",
        help="address written into records and message ids",
    )
    p.add_argument("--cluster-name", default="DefaultCluster")
    p.add_argument("--warmup", action="store_true", help="touch every page of new segments")
    p.add_argument(
        "--dispatch-linger-ms",
        type=float,
        default=WriterConfig.dispatch_linger_ms,
        help=f"when less than {LINGER_BELOW >> 20} MiB of records waits for a builder, let more "
        "puts join it for up to this long: fewer, larger dispatch batches (0 = send at once; "
        "default: %(default)s)",
    )
    add_background_flags(p)
    add_replication_flags(p)


def config_from(args: argparse.Namespace) -> WriterConfig:
    layout = StoreLayout.of(args.store)
    return WriterConfig(
        store=Path(args.store),
        segment_size=store_shape.segment_size(layout, args.commitlog_segment_size,
                                              DEFAULT_SEGMENT_SIZE),
        flush=args.flush,
        flush_interval_ms=args.flush_interval_ms,
        max_message_size=args.max_message_size,
        queues_per_topic=args.queues_per_topic,
        store_host=args.store_host,
        cluster_name=args.cluster_name,
        warmup=args.warmup,
        dispatch_linger_ms=args.dispatch_linger_ms,
        delay_levels=args.delay_levels,
        delivery=args.delivery,
        retention_hours=args.retention_hours,
        delete_when=args.delete_when,
        disk_max_used_ratio=args.disk_max_used_ratio,
        retention_interval_s=args.retention_check_seconds,
        role=args.role,
        ha_port=args.ha_port or 0,
        slave_timeout_s=args.slave_timeout,
        slave_fallbehind_max=args.slave_fallbehind_max,
        min_sync_replicas=args.min_sync_replicas,
        ha_master=args.ha_master,
        ha_retry_s=args.ha_retry_seconds,
        ha_idle_s=args.ha_idle_seconds,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m services.commitlog", description=__doc__)
    p.add_argument("--store", required=True)
    p.add_argument("--listen", default="127.0.0.1:8100")
    p.add_argument("--metrics-port", type=int, default=0)
    p.add_argument("--metrics-host", default="", help="default: the host of --listen")
    p.add_argument("--log-level", default="INFO")
    p.add_argument(
        "--put-socket", default="",
        help="also take puts on this Unix-domain socket (PutStream without gRPC, ~10x cheaper "
        "a request; for a proxy on this machine: its --commitlog-socket)",
    )  # fmt: skip
    p.add_argument(
        "--topics-file", default="",
        help="a JSON list of topics ({name, queues, perm?, type?}) created at start when the "
        "store lacks them (never changed or deleted; a slave takes its master's)",
    )  # fmt: skip
    add_store_flags(p)
    tls.add_tls_flags(p)
    args = p.parse_args(argv)
    configure_logging(args.log_level)
    return run_main("commitlog", lambda: _serve(args))


def _promotion_kept(args: argparse.Namespace) -> None:
    """A store a promotion made a master, started as a slave, starts as that master (``args``
    changed; see ``promoted``) unless ``--demote``."""
    if args.demote and args.role != "slave":
        raise StartupError("--demote goes with --role slave")
    if args.role != "slave" or args.read_only or args.demote:
        return
    try:
        was = promoted.recorded(StoreLayout.of(args.store))
    except (ValueError, OSError) as e:
        raise StartupError(f"cannot read the store's role: {e}") from None
    if was is None:
        return
    args.role, args.ha_master, args.ha_master_commitlog = was.role, "", ""
    args.ha_port = args.ha_port or was.ha_port
    log.warning("this store was promoted to %s (master term %d; it was a slave of %s): "
                "starting as %s, not as a slave as the command line says; to make it a slave "
                "again, start it with --role slave --demote", was.role, was.term,
                was.former_master, was.role)  # fmt: skip


def _peer_channel(args: argparse.Namespace) -> Callable[[str], grpc.Channel]:
    """Channels to other writers (a master's, peers'): TLS when this writer's flags say so."""
    return functools.partial(tls.client_channel, args=args)


def _newer_master_followed(args: argparse.Namespace) -> None:
    """A writer about to start as a master that finds a master of a later term among its
    ``--ha-peers`` starts as that one's slave (``args`` changed; see ``peers``)."""
    try:
        addresses = peers.parse(args.ha_peers)
    except ValueError as e:
        raise StartupError(str(e)) from None
    if args.role == "slave" or args.read_only or not addresses:
        return
    layout = StoreLayout.of(args.store)
    try:
        mastered = Terms(layout.progress("commitlog-terms")).mastered
        was = promoted.recorded(layout)
    except (ValueError, OSError) as e:
        raise StartupError(f"cannot read the store's master terms: {e}") from None
    mine = -1 if mastered is None else mastered
    try:
        newer = peers.newer_master(mine, peers.ask_all(addresses, _peer_channel(args)))
    except peers.PeerConflict as e:
        raise StartupError(f"not starting as {args.role}: {e}") from None
    except (ValueError, OSError) as e:  # a channel that cannot be made (TLS files)
        raise StartupError(f"cannot ask the peers (--ha-peers): {e}") from None
    if newer is None:
        return
    if was is not None:  # superseded by the later promotion
        promoted.forget(layout)
    log.warning("%s is %s of master term %d, later than %s: starting as its slave (HA %s), "
                "not as %s as the command line says; the bytes this store holds past that "
                "term's start go into rmqstore/quarantine/. To make this store the master "
                "again, promote it back once it has caught up (stop %s, then rmqstore admin "
                "promote --commitlog <this writer>)", newer.address, newer.role, newer.term,
                peers.own_term(mine), newer.ha_address, args.role, newer.address)  # fmt: skip
    args.role, args.ha_master, args.ha_master_commitlog = "slave", newer.ha_address, newer.address


def _serve(args: argparse.Namespace) -> int:
    credentials, m_host = preflight(args, calls_writer=False)
    _promotion_kept(args)
    _newer_master_followed(args)
    if args.read_only and args.role == "slave":
        raise StartupError("--read-only and --role slave do not go together (a slave appends "
                           "its master's bytes)")  # fmt: skip
    if (args.role == "slave") != bool(args.ha_master):
        raise StartupError("--ha-master HOST:PORT (the master's HA port) goes with --role slave, "
                           "and a slave needs one")  # fmt: skip
    try:
        config = config_from(args)
        delay.use_levels(config.delay_levels)  # before any message is built or dispatched
        engine: CommitLogEngine | ReadOnlyStore = (
            ReadOnlyStore(config) if args.read_only else CommitLogEngine(config))
    except StoreLockedError as e:
        raise StartupError(str(e)) from None
    except (StoreError, ValueError, OSError) as e:
        raise StartupError(f"cannot open the store {args.store}: {e}") from None
    if not args.config_copy_seconds > 0:
        engine.close()
        raise StartupError("--config-copy-seconds must be positive")
    if args.ha_master_commitlog and not config.is_slave:
        engine.close()
        raise StartupError("--ha-master-commitlog goes with --role slave")
    if isinstance(engine, CommitLogEngine) and args.demote and promoted.recorded(engine.layout):
        promoted.forget(engine.layout)
        log.warning("--demote: this store was promoted; it starts as a slave of %s and will "
                    "restart as one", config.ha_master)  # fmt: skip
    checked = True
    if isinstance(engine, CommitLogEngine) and config.is_slave and args.ha_master_commitlog:
        try:
            engine, checked = rejoin(engine, args.ha_master_commitlog, REJOIN_DEADLINE_S,
                                     _peer_channel(args))  # fmt: skip
        except (MasterUnknown, NewerThanMaster) as e:
            engine.close()
            raise StartupError(f"cannot follow {config.ha_master}: {e}") from None
        except (StoreError, OSError) as e:
            engine.close()
            raise StartupError(f"cannot cut the commitlog to follow {config.ha_master}: "
                               f"{e}") from None  # fmt: skip
    opened = engine
    try:
        topic_store = topics.TopicStore(
            Path(args.store), args.queues_per_topic, args.read_only,
            in_use=(lambda: opened.queue_table) if isinstance(opened, CommitLogEngine) else dict,
        )  # fmt: skip
        permission = PermissionFile(Path(args.store), args.read_only)
    except (StoreError, ValueError, OSError) as e:
        engine.close()
        raise StartupError(f"cannot open the store {args.store}: {e}") from None
    try:
        _declare_topics(args, topic_store, config.is_slave)
    except StartupError:
        engine.close()
        raise
    # delayed delivery appends and retention deletes: only a writable store has them, and a
    # slave has neither (its master's appear in the bytes it copies)
    delivery: DeliveryService | None = None
    retention: Retention | None = None
    replication: Replication | None = None
    if isinstance(engine, CommitLogEngine) and not config.is_slave:
        replication = replication_for(engine, config)
        if replication.sync and not config.ha_port:
            log.warning("--role sync_master without --ha-port: no slave can connect, every "
                        "put is answered SLAVE_NOT_AVAILABLE")
    try:
        if isinstance(engine, CommitLogEngine) and not config.is_slave:
            try:
                delivery = DeliveryService(engine) if config.delivery else None
            except StoreError as e:
                raise StartupError(f"cannot start delayed delivery: {e}") from None
            retention = Retention(engine)
        registry = metrics.new_registry("commitlog")
        observer = WriterObserver(engine, registry, delivery, retention, replication)
        observer.permission = permission
        metrics_server = metrics.start_metrics_server(
            args.metrics_port, registry, m_host)
        # calls run on one event loop; each builder's dispatch stream waits for records in a
        # worker thread (64 subscribers at most, see the engine), nothing else does
        service = AsyncService(args.listen, credentials=credentials, blocking_workers=96)
    except BaseException:
        _stop_background(delivery, retention)
        engine.close()
        raise
    servicer = CommitLogServicer(engine, observer, service.run_blocking, delivery, retention,
                                 replication)
    service.add(
        add_to_server,
        servicer,
        commitlog_pb2.DESCRIPTOR,
        "CommitLog",
    )
    service.add(
        topics.add_to_server,
        topics.TopicsServicer(topic_store, service.run_blocking, permission),
        topics_pb2.DESCRIPTOR,
        "Topics",
    )

    put_server = None
    if args.put_socket and not args.read_only:
        try:
            put_server = service.call(put_socket.serve(args.put_socket, servicer))
        except OSError as e:
            service.stop()
            _stop_background(delivery, retention)
            engine.close()
            raise StartupError(f"cannot listen on the put socket {args.put_socket}: {e}") from None
    host = args.listen.rsplit(":", 1)[0].strip("[]")
    if replication is not None and config.ha_port:
        try:
            service.call(replication.listen(host, config.ha_port))
        except OSError as e:
            if put_server is not None:
                service.call(put_socket.close(put_server))
            service.stop()
            _stop_background(delivery, retention)
            engine.close()
            raise StartupError(f"cannot listen on the HA port {host}:{config.ha_port}: "
                               f"{e}") from None  # fmt: skip
    if delivery is not None:
        delivery.start()
    if retention is not None:
        retention.start()
    slave = HaSlave(engine) if isinstance(engine, CommitLogEngine) and config.is_slave else None
    if slave is not None:
        if not checked:
            slave.check = LateCheck(slave.replica.engine, args.ha_master_commitlog,
                                    _peer_channel(args))  # fmt: skip
        ha_slave.watch(registry, slave)
        slave.start()
    roles = Roles(engine, host, observer, service.run_blocking, slave, replication, delivery,
                  retention)  # fmt: skip
    if slave is not None and args.ha_master_commitlog:
        roles.config_copy = ConfigCopy(slave.replica.engine.layout, topic_store,
                                       args.ha_master_commitlog, args.config_copy_seconds,
                                       _peer_channel(args), permission)  # fmt: skip
        roles.config_copy.start()
    if isinstance(engine, CommitLogEngine):
        servicer.use(roles)
        roles.on_change.append(servicer.use)  # after a promotion

    def stop() -> None:
        if put_server is not None:
            service.call(put_socket.close(put_server))
        if roles.replication is not None:
            service.call(roles.replication.close())
        service.stop()
        if roles.slave is not None:  # before the engine it appends to closes
            roles.slave.close()
        if roles.config_copy is not None:
            roles.config_copy.close()
        _stop_background(roles.delivery, roles.retention)  # before the engine closes
        engine.close()
        if metrics_server is not None:
            metrics_server.stop()

    service.serve("commitlog", stop)
    return 0


def _declare_topics(args: argparse.Namespace, store: topics.TopicStore, slave: bool) -> None:
    """The topics of ``--topics-file`` the store lacks, created (``declared_topics``)."""
    if not args.topics_file:
        return
    if args.read_only:
        raise StartupError("--topics-file creates topics, and a --read-only store takes none")
    try:
        declared = declared_topics.load(args.topics_file)
        if slave:
            log.info("--topics-file: %d topics declared; a slave takes its master's topics",
                     len(declared))  # fmt: skip
            return
        declared_topics.apply(store, declared)
    except ValueError as e:
        raise StartupError(f"--topics-file: {e}; no topic was created") from None
    except OSError as e:
        raise StartupError(f"--topics-file: cannot write {store.path}: {e}") from None


def _stop_background(delivery: DeliveryService | None, retention: Retention | None) -> None:
    """Stop delayed delivery (it persists its offsets), then retention."""
    if delivery is not None:
        delivery.close()
    if retention is not None:
        retention.close()


if __name__ == "__main__":
    sys.exit(main())
