"""The alert rules and the example Prometheus config we ship, checked by promtool."""

import re
from pathlib import Path

import yaml

from tests.deploy.conftest import (
    PROMETHEUS_CONFIG,
    ROOT,
    RULES,
    exported_series_names,
    run_promtool,
)

METRIC = re.compile(r"\b(rmqstore_[a-z0-9_]+)")


def _rules() -> list[dict]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_promtool_accepts_rules(promtool: str) -> None:
    result = run_promtool(promtool, "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in result.stdout


def test_promtool_rejects_a_broken_rule(promtool: str, tmp_path: Path) -> None:
    """The check above can fail: a rule with a PromQL syntax error is refused."""
    doc = yaml.safe_load(RULES.read_text())
    doc["groups"][0]["rules"][0]["expr"] = "max by (builder (rmqstore_builder_lag_bytes) >"
    broken = tmp_path / "rules.yml"
    broken.write_text(yaml.safe_dump(doc))
    result = run_promtool(promtool, "check", "rules", str(broken))
    assert result.returncode != 0


def test_promtool_accepts_config_and_its_rule_files(promtool: str) -> None:
    result = run_promtool(promtool, "check", "config", str(PROMETHEUS_CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    assert config["rule_files"] == ["rules.yml"]
    assert "SUCCESS: 1 rule files found" in result.stdout


def test_rules_use_only_exported_metrics() -> None:
    exported = exported_series_names()
    for rule in _rules():
        used = set(METRIC.findall(rule["expr"]))
        assert used, f"{rule['alert']} uses no rmqstore metric"
        assert used <= exported, f"{rule['alert']} uses unknown {sorted(used - exported)}"


def test_rules_cover_lag_flush_latency_and_disk() -> None:
    used = {m for rule in _rules() for m in METRIC.findall(rule["expr"])}
    for needed in (
        "rmqstore_builder_lag_bytes",
        "rmqstore_builder_lag_seconds",
        "rmqstore_writer_flush_duration_seconds_bucket",
        "rmqstore_builder_flush_duration_seconds_bucket",
        "rmqstore_store_filesystem_avail_bytes",
    ):
        assert needed in used


def test_rules_cover_replication_on_both_sides() -> None:
    alerts = {rule["alert"]: rule for rule in _rules()}
    for name, metric in (
        ("RmqstoreSyncMasterWithoutSlave", "rmqstore_writer_slaves_in_sync"),
        ("RmqstoreSlaveLagging", "rmqstore_writer_slave_lag_bytes"),
        ("RmqstoreSlaveDisconnected", "rmqstore_ha_slave_connected"),
        ("RmqstoreSlaveDiverged", "rmqstore_ha_slave_diverged"),
    ):
        assert metric in alerts[name]["expr"], name


def test_every_alert_has_severity_and_text() -> None:
    names = [rule["alert"] for rule in _rules()]
    assert len(names) == len(set(names))
    for rule in _rules():
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_example_config_scrapes_the_chart_default_metrics_ports() -> None:
    values = yaml.safe_load((ROOT / "helm" / "rmqstore" / "values.yaml").read_text())
    chart_ports = {
        values[key]["metricsPort"]
        for key in ("commitlog", "consumeQueue", "index", "query", "proxy", "remoting", "namesrv")
    }
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    scraped = {
        int(target.rsplit(":", 1)[1])
        for job in config["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    }
    assert scraped == chart_ports


def test_example_config_names_the_broker_of_every_broker_target() -> None:
    """The dashboard's broker variable lists the ``broker`` label: every target but the name
    server's (no broker's) sets it."""
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    statics = [s for job in config["scrape_configs"] for s in job["static_configs"]]
    for static in statics:
        if static["labels"]["service"] == "namesrv":
            assert "broker" not in static["labels"]
        else:
            assert static["labels"]["broker"] == "broker-a", static
