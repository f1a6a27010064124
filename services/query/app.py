"""Wiring of the query service's parts over one store directory and one record source."""

from dataclasses import dataclass
from pathlib import Path

from rmqstore.formats.index_file import DEFAULT_ENTRIES, DEFAULT_SLOTS
from rmqstore.layout import StoreLayout
from services.query.budget import BudgetLimits
from services.query.index_reader import IndexCatalog
from services.query.lookup import KeyLookup
from services.query.metrics import QueryObserver
from services.query.offset_by_time import TimeSearch
from services.query.pull import Puller
from services.query.queue_reader import QueueCatalog
from services.query.record_source import RecordSource
from services.query.servicer import QueryServicer


@dataclass
class QueryApp:
    keys: KeyLookup
    puller: Puller
    times: TimeSearch
    catalog: IndexCatalog
    queues: QueueCatalog

    @classmethod
    def build(cls, store: str | Path, source: RecordSource, index_slots: int = DEFAULT_SLOTS,
              index_entries: int = DEFAULT_ENTRIES, limits: BudgetLimits | None = None
              ) -> "QueryApp":
        layout = StoreLayout.of(store)
        catalog = IndexCatalog(layout.index_dir, index_slots, index_entries)
        catalog.check_all()
        queues = QueueCatalog(layout.consumequeue_dir)
        return cls(
            keys=KeyLookup(layout, catalog, source, limits),
            puller=Puller(queues, source),
            times=TimeSearch(queues, source),
            catalog=catalog,
            queues=queues,
        )

    def close(self) -> None:
        """Unmap the index and consume-queue files."""
        self.catalog.close()
        self.queues.close()

    def servicer(self, observer: QueryObserver | None = None) -> QueryServicer:
        return QueryServicer(self.keys, self.puller, self.times, observer)
