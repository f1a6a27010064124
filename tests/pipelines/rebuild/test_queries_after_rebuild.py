"""A store whose consume queues and index were deleted is rebuilt in place and then answers
every query as before: the 40 golden key queries and a pull of every queue, through the
query service's own lookups, equal their answers over RocketMQ's original files."""

import shutil
from pathlib import Path

import pytest

from pipelines.rebuild.job import RebuildSettings, rebuild
from services.query import app as app_mod
from tests.aio import run
from tests.services.query import golden_model as model
from tests.services.query import segment_source as source_mod

pytestmark = [pytest.mark.spark, pytest.mark.golden]



def _app(store: Path, config: dict):
    src = source_mod.SegmentRecordSource(store / "commitlog", config["mappedFileSizeCommitLog"])
    return app_mod.QueryApp.build(store, src, config["maxHashSlotNum"], config["maxIndexNum"])


def test_rebuilt_store_answers_every_query_as_before(spark, golden_store, golden_expected,
                                                     tmp_path: Path):
    c = golden_expected["config"]
    store = tmp_path / "store"
    shutil.copytree(golden_store, store)
    shutil.rmtree(store / "consumequeue")
    shutil.rmtree(store / "index")
    rebuild(spark, store, store, RebuildSettings(
        index_slots=c["maxHashSlotNum"], index_entries=c["maxIndexNum"],
        cq_entries_per_file=c["consumeQueueEntriesPerFile"]))
    before, after = _app(golden_store, c), _app(store, c)
    try:
        for q in golden_expected["queries"]:
            want, truncated = model.expected_page(golden_expected["messages"], q)
            args = (q["topic"], q["key"], q["begin"], q["end"], q["maxNum"])
            old, new = run(before.keys.by_key(*args)), run(after.keys.by_key(*args))
            assert [r.physical_offset for r in new.records] == want, q["note"]
            assert [r.physical_offset for r in old.records] == want, q["note"]
            assert new.truncated == old.truncated == truncated
            if truncated:  # cursors name index files, so they differ; the next pages do not
                nxt_old = run(before.keys.by_key(*args, cursor=old.cursor))
                nxt_new = run(after.keys.by_key(*args, cursor=new.cursor))
                assert [r.physical_offset for r in nxt_new.records] == \
                    [r.physical_offset for r in nxt_old.records] != []
        queues = {(q.split("/")[0], int(q.split("/")[1]))
                  for q in golden_expected["consumeQueues"]}
        assert len(queues) == 10
        for topic, qid in sorted(queues):
            pages = {"before": [], "after": []}
            for label, app in (("before", before), ("after", after)):
                offset = 0
                for _ in range(100):
                    res = run(app.puller.pull(topic, qid, offset, 1000))
                    pages[label].append((res.status, res.next_offset, res.min_offset,
                                         res.max_offset,
                                         [r.physical_offset for r in res.records]))
                    if not res.records or res.next_offset == offset:
                        break
                    offset = res.next_offset
            assert pages["after"] == pages["before"]
            assert [phy for page in pages["after"] for phy in page[4]] == \
                [e["phyOffset"] for e in golden_expected["consumeQueues"][f"{topic}/{qid}"]]
    finally:
        before.catalog.close()
        after.catalog.close()
