"""The records a delivery needs, by the commitlog offsets its consume-queue units give:
read from the commitlog files (``rmqstore.commitlog_reads``: no call to the writer), and of
the writer only those the files cannot give (a segment removed meanwhile, anything
unexpected), whose answer — a record or an error — stands."""

from pathlib import Path

from rmqstore.commitlog_reads import CommitlogReads
from rmqstore.formats import commitlog
from services.proxy.appender import Appender
from services.proxy.progress import Flight


class RecordReads:
    def __init__(self, store: Path, writer: Appender) -> None:
        self.files = CommitlogReads(store)
        self.writer = writer

    async def records(self, flights: list[Flight]) -> list[commitlog.Record]:
        got = self.files.records([(f.phy, f.size) for f in flights])
        missing = [i for i, r in enumerate(got) if r is None]
        if missing:
            raws = await self.writer.read_many([flights[i].phy for i in missing])
            for i, raw in zip(missing, raws, strict=True):
                got[i] = commitlog.decode(raw, 0, check_crc=False)
        return [r for r in got if r is not None]  # every None was filled
