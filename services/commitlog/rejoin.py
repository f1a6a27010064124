"""A slave that starts checks its history against its master's before it follows.

RocketMQ's HA port carries bytes and offsets only: a former master that rejoins as the slave
of the slave promoted in its place would report its own end and get the new master's bytes
from there, appended to a tail the new master never had. Between two rmqstore nodes the
slave asks the master's writer (gRPC ``GetTerms``, ``--ha-master-commitlog``) where each of
its master terms began (``terms.py``), and before following:

* cuts its commit log where the two histories part (the start of the master's first term
  later than its own), moving the bytes past it into ``rmqstore/quarantine/`` (kept, never
  deleted: they are messages no producer was told were replicated);
* begins a writer epoch at the cut, so its builders cut their consume queues and index
  there too when they reconnect;
* adopts the master's terms.

A master whose writer does not answer at start-up (down, like the slave) is checked again
before each connection to its HA port, and the slave does not follow it until it has been:
a check that finds a cut to make then keeps the slave from following and says to restart it
(the cut is made at start-up, before the builders connect).
"""

import logging
import time
from collections.abc import Callable

import grpc

from rmqstore import quarantine
from rmqstore.layout import StoreLayout
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CommitLogEngine
from services.commitlog.recovery import Recovered, quarantine_beyond, zero_tail
from services.commitlog.segment_files import SegmentQueue
from services.commitlog.terms import NewerThanMaster, Term, diverges_at

log = logging.getLogger(__name__)
RPC_TIMEOUT_S = 5.0


class MasterUnknown(Exception):
    """The master's writer did not say where its terms began."""


class MasterIsSlave(MasterUnknown):
    """The writer named as the master is a slave itself."""


def master_terms(address: str, deadline_s: float = 0,
                 open_channel: Callable[[str], grpc.Channel] = channel) -> list[Term]:
    """The master writer's terms; retried until ``deadline_s`` has passed."""
    until = time.monotonic() + deadline_s
    while True:
        try:
            with open_channel(address) as ch:
                got = commitlog_pb2_grpc.CommitLogStub(ch).GetTerms(
                    commitlog_pb2.GetTermsRequest(), timeout=RPC_TIMEOUT_S)
        except grpc.RpcError as e:
            if time.monotonic() >= until:
                code = e.code() if isinstance(e, grpc.Call) else None
                raise MasterUnknown(f"the master's writer at {address} did not answer GetTerms "
                                    f"({code}): start the master first, or check "
                                    "--ha-master-commitlog") from None  # fmt: skip
            time.sleep(0.5)
            continue
        if got.role == "slave":
            raise MasterIsSlave(f"the writer at {address} is a slave, not a master: point "
                                "--ha-master-commitlog at the master's writer")  # fmt: skip
        return [(t.term, t.start_offset) for t in got.terms]


def cut_commitlog(config: WriterConfig, offset: int, reason: str) -> int:
    """Move every byte of a closed store's commit log past ``offset`` into the quarantine,
    then cut it there; the bytes moved."""
    layout = StoreLayout.of(config.store)
    segments = SegmentQueue(layout.commitlog_dir, config.segment_size, preallocate=False)
    try:
        segments.open_existing(segments.existing_files())
        out = Recovered()

        def keep(at: int, data: memoryview, segment: str, why: str) -> None:
            quarantine.keep(layout, at, data, segment, why)

        quarantine_beyond(segments.segments, offset, reason, keep, out)
        for seg in segments.segments:
            if seg.start <= offset < seg.end:
                zero_tail(seg, offset - seg.start)
                seg.map.flush()
        segments.remove_beyond(offset)
        return out.quarantined_bytes
    finally:
        segments.close()


def rejoin(engine: CommitLogEngine, master_commitlog: str, deadline_s: float,
           open_channel: Callable[[str], grpc.Channel] = channel
           ) -> tuple[CommitLogEngine, bool]:  # fmt: skip
    """Check ``engine``'s history against its master's: the engine to serve (a new one if its
    log was cut) and whether the check was made (False: the master's writer did not answer)."""
    config = engine.config
    try:
        theirs = master_terms(master_commitlog, deadline_s, open_channel)
    except MasterIsSlave:
        raise
    except MasterUnknown as e:
        log.warning("%s; the slave follows %s once it has answered", e, config.ha_master)
        return engine, False
    end = engine.max_offset
    cut = diverges_at(engine.terms.history, theirs, end)
    if cut is not None:
        reason = (f"rejoining {config.ha_master} as its slave: the master's history parts from "
                  f"this store's at {cut} (master terms {theirs}, this store's "
                  f"{engine.terms.history}); these bytes were never replicated to it")  # fmt: skip
        log.warning("this store ends at %d, but its master %s took over at %d: moving [%d, %d) "
                    "into the quarantine before following", end, config.ha_master, cut, cut,
                    end)  # fmt: skip
        engine.close()
        moved = cut_commitlog(config, cut, reason)
        engine = CommitLogEngine(config)
        epoch = engine.epochs.begin(cut)
        log.warning("cut the commitlog at %d (%d bytes kept in rmqstore/quarantine/); writer "
                    "epoch %d begins there", cut, moved, epoch)  # fmt: skip
    engine.terms.adopt(theirs)
    return engine, True


class LateCheck:
    """The check of a slave whose master's writer did not answer at start-up, made before
    each connection (``HaSlave.check``) until it has passed."""

    def __init__(self, engine: CommitLogEngine, master_commitlog: str,
                 open_channel: Callable[[str], grpc.Channel] = channel) -> None:
        self.open_channel = open_channel
        self.engine = engine
        self.address = master_commitlog
        self.passed = False

    def __call__(self) -> str:
        if self.passed:
            return ""
        try:
            theirs = master_terms(self.address, 0, self.open_channel)
            cut = diverges_at(self.engine.terms.history, theirs, self.engine.max_offset)
        except (MasterUnknown, NewerThanMaster) as e:
            return f"not following {self.engine.config.ha_master} yet: {e}"
        if cut is not None:
            return (f"not following {self.engine.config.ha_master}: its history parts from this "
                    f"store's at {cut}, and this store ends at {self.engine.max_offset}; restart "
                    "this writer to move the bytes past the cut into the quarantine and follow")
        self.engine.terms.adopt(theirs)
        self.passed = True
        log.info("the master %s's history continues this store's: following it",
                 self.engine.config.ha_master)  # fmt: skip
        return ""
