"""The Grafana dashboard: valid against Grafana's schema, and every query is real PromQL over
metrics we export."""

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.deploy.conftest import (
    DASHBOARD,
    DASHBOARD_SCHEMA,
    exported_series_names,
    run_promtool,
)

METRIC = re.compile(r"\b((?:rmqstore|process)_[a-z0-9_]+)")


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = json.loads(DASHBOARD_SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def _panels(dashboard: dict) -> list[dict]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def _targets(dashboard: dict) -> list[tuple[dict, dict]]:
    return [(p, t) for p in _panels(dashboard) for t in p.get("targets", [])]


def test_dashboard_matches_grafana_schema(
    dashboard: dict, validator: jsonschema.Draft7Validator
) -> None:
    errors = sorted(validator.iter_errors(dashboard), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:10])


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.pop("schemaVersion"),
        lambda d: d["panels"][1].pop("type"),
        lambda d: d["panels"][1]["gridPos"].update(width=3),
        lambda d: d["panels"][1]["fieldConfig"].pop("overrides"),
        lambda d: d.update(refresh=30),
    ],
    ids=["no-schemaVersion", "panel-without-type", "unknown-gridPos-key", "no-overrides",
         "refresh-not-string"],
)
def test_schema_catches_malformed_dashboards(
    dashboard: dict, validator: jsonschema.Draft7Validator, mutate
) -> None:
    broken = json.loads(json.dumps(dashboard))
    mutate(broken)
    assert not validator.is_valid(broken)


def test_panel_ids_are_unique_and_panels_do_not_overlap(dashboard: dict) -> None:
    panels = _panels(dashboard)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]


def test_every_query_uses_exported_metrics(dashboard: dict) -> None:
    exported = exported_series_names()
    for panel, target in _targets(dashboard):
        used = set(METRIC.findall(target["expr"]))
        assert used, f"{panel['title']}: {target['expr']}"
        assert used <= exported, f"{panel['title']}: unknown {sorted(used - exported)}"


def test_every_query_is_valid_promql(dashboard: dict, promtool: str, tmp_path: Path) -> None:
    """promtool parses each panel query (as a recording rule; Grafana's $__ variables set)."""
    rules = [
        {
            "record": f"dashboard:panel_{panel['id']}_{target['refId']}",
            "expr": target["expr"].replace("$__rate_interval", "1m"),
        }
        for panel, target in _targets(dashboard)
    ]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run_promtool(promtool, "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_dashboard_covers_what_operators_watch(dashboard: dict) -> None:
    used = {m for _, t in _targets(dashboard) for m in METRIC.findall(t["expr"])}
    for needed in (
        "rmqstore_writer_puts_total",  # put rate
        "rmqstore_writer_put_latency_seconds_bucket",  # latency percentiles
        "rmqstore_builder_lag_bytes",  # lag per builder
        "rmqstore_writer_subscriber_lag_bytes",
        "rmqstore_index_slot_occupancy_ratio",  # index health
        "rmqstore_index_chain_length_bucket",
        "rmqstore_query_latency_seconds_bucket",  # query latency
        "rmqstore_store_filesystem_avail_bytes",  # disk use
        "rmqstore_writer_put_status_total",  # replication, the master's side
        "rmqstore_writer_slaves_in_sync",
        "rmqstore_writer_slave_lag_bytes",
        "rmqstore_ha_slave_connected",  # and the slave's
        "rmqstore_ha_slave_offset_bytes",
        "rmqstore_ha_slave_diverged",
    ):
        assert needed in used, needed


def test_replication_has_a_row_for_each_side(dashboard: dict) -> None:
    rows = [p["title"] for p in _panels(dashboard) if p["type"] == "row"]
    assert {"Replication (master)", "Replication (slave)"} <= set(rows)


def test_queries_use_the_datasource_variable(dashboard: dict) -> None:
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert "datasource" in variables
    for panel, target in _targets(dashboard):
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert target["datasource"]["uid"] == "${datasource}", panel["title"]


BROKER_FILTER = 'broker=~"$broker"'
SELECTOR = re.compile(r"\b((?:rmqstore|process)_[a-z0-9_]+)(\{[^}]*\})?")


def test_the_broker_variable_lists_the_brokers_label(dashboard: dict) -> None:
    """The chart's ServiceMonitor and the example scrape config set ``broker`` on every
    broker's series; All matches series without it too (a scrape config that sets none)."""
    [var] = [v for v in dashboard["templating"]["list"] if v["name"] == "broker"]
    assert var["type"] == "query" and var["datasource"]["uid"] == "${datasource}"
    assert var["query"]["query"] == "label_values(rmqstore_writer_puts_total, broker)"
    assert var["multi"] and var["includeAll"] and var["allValue"] == ".*"


def test_every_broker_query_is_filtered_by_the_broker_variable(dashboard: dict) -> None:
    """Each metric selector of every query carries the filter, except the name servers'
    (no broker's)."""
    for panel, target in _targets(dashboard):
        if "rmqstore_namesrv_" in target["expr"]:
            assert "$broker" not in target["expr"], panel["title"]
            continue
        for metric, matchers in SELECTOR.findall(target["expr"]):
            assert BROKER_FILTER in matchers, f"{panel['title']}: {metric} {matchers}"


def test_the_brokers_row_shows_each_broker(dashboard: dict) -> None:
    """The first row: puts, latency, builder lag, consumer lag and disk, one series a broker."""
    rows = [p for p in dashboard["panels"] if p["type"] == "row"]
    assert rows[0]["title"] == "Brokers"
    after = [p for p in dashboard["panels"] if p["type"] == "row"][1]["gridPos"]["y"]
    panels = [p for p in dashboard["panels"]
              if p["type"] != "row" and p["gridPos"]["y"] < after]  # fmt: skip
    used = set()
    for panel in panels:
        for target in panel["targets"]:
            assert re.match(r"^(\w+\(.*)?\b(sum|max) by \(broker\b", target["expr"]), \
                target["expr"]
            assert target["legendFormat"].startswith("{{broker}}"), panel["title"]
            used |= set(METRIC.findall(target["expr"]))
    for needed in ("rmqstore_writer_puts_total", "rmqstore_builder_lag_bytes",
                   "rmqstore_consumer_lag_messages", "rmqstore_store_filesystem_avail_bytes"):
        assert needed in used, needed
