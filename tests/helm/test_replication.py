"""``replication.slaves``: one broker as a master (pod 0) and its slaves, each pod picking its
writer's role by its ordinal; the objects are valid Kubernetes in both modes."""

import os
import stat
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest

from tests.helm.conftest import (
    ALL_ON,
    NAMESPACE,
    RELEASE,
    broker_sts,
    by_kind,
    named,
    render,
)  # fmt: skip
from tests.helm.test_chart import KUBE_VERSIONS, SERVICE_MODULES, _lint

FULLNAME = f"{RELEASE}-rmqstore"
HEADLESS = f"{FULLNAME}-headless"
MASTER = f"{FULLNAME}-0.{HEADLESS}.{NAMESPACE}.svc:10912"


def _writer_at(ordinal: int) -> str:
    return f"{FULLNAME}-{ordinal}.{HEADLESS}.{NAMESPACE}.svc:8100"


def _peers(ordinal: int) -> str:
    """The --ha-peers of pod ``ordinal``: the writers of ordinals 0..16 but its own."""
    return ",".join(_writer_at(i) for i in range(17) if i != ordinal)
MODES = {"async": "async_master", "sync": "sync_master"}


def _values(mode: str, **more: object) -> dict:
    return {"replication": {"slaves": 2, "mode": mode}, **more}


def _pod(objects: list[dict]) -> dict:
    return broker_sts(objects)["spec"]["template"]["spec"]


def _containers(objects: list[dict]) -> dict[str, dict]:
    return {c["name"]: c for c in _pod(objects)["containers"]}


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
@pytest.mark.parametrize("mode", list(MODES))
def test_replicated_objects_are_valid_kubernetes(mode: str, kube: str) -> None:
    for values in (_values(mode), _values(mode, **{k: v for k, v in ALL_ON.items()
                                                   if k not in ("affinity", "replicas")})):
        for obj in render(values):
            if obj["apiVersion"].startswith("monitoring.coreos.com/"):
                continue
            kubernetes_validate.validate(obj, kube, strict=True)


@pytest.mark.parametrize("mode", list(MODES))
def test_lint_is_clean_with_slaves(mode: str) -> None:
    report = _lint(_values(mode))
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("values", [{"slaves": -1}, {"slaves": "2"}, {"mode": "semi"},
                                    {"haPort": 0}, {"slave": 1}, {"master": -1},
                                    {"master": "1"}, {"master": []}],
                         ids=["negative", "string", "bad-mode", "port-zero", "misspelt-key",
                              "master-negative", "master-string", "master-empty-list"])
def test_lint_refuses_bad_replication_values(values: dict) -> None:
    report = _lint({"replication": values})
    assert "/replication" in "".join(report["errors"])


def _fake_python(tmp_path: Path) -> Path:
    """A ``python`` on PATH that prints the arguments it was given, one a line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def _exec_line(writer: dict, pod: str, bin_dir: Path) -> list[str]:
    """What the writer container execs in pod ``pod`` (the kubelet joins command and args)."""
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "POD_NAME": pod}
    out = subprocess.run([*writer["command"], *writer["args"]], env=env, check=True,
                         capture_output=True, text=True, timeout=10).stdout
    return out.splitlines()


@pytest.mark.parametrize("mode", list(MODES))
def test_pod_0_is_the_master_and_the_others_its_slaves(mode: str, tmp_path: Path) -> None:
    objects = render(_values(mode))
    assert broker_sts(objects)["spec"]["replicas"] == 3
    writer = _containers(objects)["commitlog"]
    assert writer["command"][:2] == ["sh", "-c"]
    assert {"name": "ha", "containerPort": 10912, "protocol": "TCP"} in writer["ports"]
    env = {e["name"]: e for e in writer["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    bin_dir = _fake_python(tmp_path)
    master = _exec_line(writer, f"{FULLNAME}-0", bin_dir)
    assert master[:2] == ["-m", "services.commitlog"]
    assert master[-6:] == ["--role", MODES[mode], "--ha-port", "10912", "--ha-peers", _peers(0)]
    assert master[:-6] == writer["args"]  # every other flag as rendered
    for ordinal in (1, 2, 10):
        slave = _exec_line(writer, f"{FULLNAME}-{ordinal}", bin_dir)
        assert slave == [*writer["args"], "--role", "slave", "--ha-port", "10912",  # promoted
                         "--ha-master", MASTER, "--ha-master-commitlog", _writer_at(0),
                         "--ha-peers", _peers(ordinal)]  # fmt: skip


def test_replication_master_moves_the_master_role_and_the_clients(tmp_path: Path) -> None:
    """After a switchover to pod 1, ``replication.master: 1``: pod 1's writer starts as the
    master, the others as its slaves, the client Service and the name-server registration
    follow it."""
    objects = render({"replication": {"slaves": 2, "mode": "sync", "master": 1}})
    containers = _containers(objects)
    bin_dir = _fake_python(tmp_path)
    writer = containers["commitlog"]
    master = _exec_line(writer, f"{FULLNAME}-1", bin_dir)
    assert master[-6:] == ["--role", "sync_master", "--ha-port", "10912", "--ha-peers",
                           _peers(1)]  # fmt: skip
    pod_1 = f"{FULLNAME}-1.{HEADLESS}.{NAMESPACE}.svc:10912"
    for ordinal in (0, 2):
        slave = _exec_line(writer, f"{FULLNAME}-{ordinal}", bin_dir)
        assert slave[-10:] == ["--role", "slave", "--ha-port", "10912", "--ha-master", pod_1,
                               "--ha-master-commitlog", _writer_at(1), "--ha-peers",
                               _peers(ordinal)]  # fmt: skip
    client = named(objects, "Service", FULLNAME)["spec"]
    assert client["selector"]["statefulset.kubernetes.io/pod-name"] == f"{FULLNAME}-1"
    remoting = containers["remoting"]
    assert "--namesrv" in _exec_line(remoting, f"{FULLNAME}-1", bin_dir)
    assert "--namesrv" not in _exec_line(remoting, f"{FULLNAME}-0", bin_dir)


def test_replication_master_per_broker() -> None:
    values = {"brokers": 2, "namesrv": {"enabled": True},
              "replication": {"slaves": 1, "master": [0, 1]}}
    services = {s["metadata"]["name"]: s["spec"] for s in by_kind(render(values), "Service")}
    for i, ordinal in enumerate([0, 1]):
        broker = f"{FULLNAME}-broker-{i}"
        assert services[broker]["selector"]["statefulset.kubernetes.io/pod-name"] == \
            f"{broker}-{ordinal}"


def test_replication_master_out_of_range_is_refused() -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmError, match="replication.master is 3, but the broker's pods "
                                             "are 0..2"):  # fmt: skip
        render({"replication": {"slaves": 2, "master": 3}})
    with pytest.raises(helm.HelmError, match="lists 1 ordinal"):
        render({"brokers": 2, "namesrv": {"enabled": True},
                "replication": {"slaves": 1, "master": [1]}})


def test_every_pod_runs_the_same_services() -> None:
    """Builders, query and proxy run on slaves as on the master (reads work on a slave; its
    writer refuses the proxy's sends, naming the master); only the writer's command differs,
    and the remoting broker's (only pod 0 registers with the name servers)."""
    plain, replicated = _containers(render({})), _containers(render(_values("sync")))
    assert list(replicated) == list(SERVICE_MODULES)
    for name, c in replicated.items():
        if name not in ("commitlog", "remoting"):
            assert c == plain[name]


def test_clients_reach_the_master_and_slaves_reach_it_on_the_headless_service() -> None:
    objects = render(_values("sync", networkPolicy={"enabled": True}))
    services = {s["metadata"]["name"]: s for s in by_kind(objects, "Service")}
    client = services[FULLNAME]["spec"]
    assert client["selector"]["statefulset.kubernetes.io/pod-name"] == f"{FULLNAME}-0"
    assert {p["name"] for p in client["ports"]} == {"grpc-proxy", "remoting"}
    headless = services[HEADLESS]["spec"]
    assert {"name": "ha", "port": 10912, "protocol": "TCP", "targetPort": "ha"} in \
        headless["ports"]
    assert headless["publishNotReadyAddresses"] is True  # a slave finds a starting master
    assert "statefulset.kubernetes.io/pod-name" not in headless["selector"]
    policy = named(objects, "NetworkPolicy", FULLNAME)["spec"]
    [ha_rule] = [r for r in policy["ingress"] if r["ports"] == [
        {"port": "ha", "protocol": "TCP"}, {"port": "grpc-writer", "protocol": "TCP"}]]
    assert ha_rule["from"] == [{"podSelector": {"matchLabels": policy["podSelector"]
                                                ["matchLabels"]}}]


def test_disruption_budget_and_anti_affinity_spread_the_broker() -> None:
    objects = render(_values("async"))
    pdb = named(objects, "PodDisruptionBudget", FULLNAME)["spec"]
    pod_labels = broker_sts(objects)["spec"]["template"]["metadata"]["labels"]
    assert pdb["maxUnavailable"] == 1
    assert pdb["selector"]["matchLabels"].items() <= pod_labels.items()
    [term] = _pod(objects)["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == pdb["selector"][
        "matchLabels"]
    # the user's affinity is used as given; both can be turned off
    mine = render(_values("async", affinity=ALL_ON["affinity"]))
    assert _pod(mine)["affinity"] == ALL_ON["affinity"]
    off = render({"replication": {"slaves": 1, "podAntiAffinity": False,
                                  "podDisruptionBudget": False}})
    assert "affinity" not in _pod(off) and not _broker_pdb(off)
    assert not _broker_pdb(render({**_values("async"), "replicas": 0}))


def _broker_pdb(objects: list[dict]) -> list[dict]:
    """The broker's PodDisruptionBudget, if any (the name servers have their own)."""
    return [p for p in by_kind(objects, "PodDisruptionBudget") if p["metadata"]["name"] == FULLNAME]


def test_without_slaves_the_pod_is_as_before(default_objects: list[dict]) -> None:
    writer = _containers(default_objects)["commitlog"]
    assert writer["command"] == ["python"] and "--role" not in writer["args"]
    assert "ha" not in {p["name"] for p in writer["ports"]}
    assert not _broker_pdb(default_objects)
    client = next(s for s in by_kind(default_objects, "Service")
                  if s["metadata"]["name"] == FULLNAME)
    assert "statefulset.kubernetes.io/pod-name" not in client["spec"]["selector"]


def test_more_brokers_and_read_only_slaves_are_still_refused() -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmError, match="replication.slaves"):
        render({**_values("async"), "replicas": 2})
    with pytest.raises(helm.HelmError, match="readOnly store"):
        render({**_values("async"), "readOnly": True})


def test_one_slave_more_or_less_restarts_no_running_pod() -> None:
    """The pod template is the same for 1 or 2 slaves: scaling starts or stops pods only."""
    def template(slaves: int, mode: str = "sync") -> dict:
        values = {"replication": {"slaves": slaves, "mode": mode}}
        return broker_sts(render(values))["spec"]["template"]

    assert template(1) == template(2) == template(5)
    assert template(0) != template(1)  # the writer's command and the HA port
    assert template(1) != template(1, "async")
