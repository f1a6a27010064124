"""``brokers: N``: N broker groups, each a StatefulSet of a master and its slaves, registered
with the chart's name servers under a name of its own; valid Kubernetes, lint clean."""

from pathlib import Path

import kubernetes_validate
import pytest

from tests.helm.conftest import NAMESPACE, RELEASE, by_kind, named, render
from tests.helm.test_chart import KUBE_VERSIONS, _lint
from tests.helm.test_replication import _exec_line, _fake_python

FULLNAME = f"{RELEASE}-rmqstore"
BROKERS = [f"{FULLNAME}-broker-{i}" for i in range(3)]
NAMESRV = ";".join(f"{FULLNAME}-namesrv-{i}.{FULLNAME}-namesrv-headless.{NAMESPACE}.svc:9876"
                   for i in range(2))  # fmt: skip
VALUES = {"brokers": 3, "replication": {"slaves": 1}, "cluster": {"name": "Orders"},
          "rebuild": {"enabled": True}, "serviceMonitor": {"enabled": True},
          "topics": [{"name": "Orders", "queues": 8, "type": "FIFO"}]}


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    return render(VALUES)


def _containers(sts: dict) -> dict[str, dict]:
    return {c["name"]: c for c in sts["spec"]["template"]["spec"]["containers"]}


def _flag(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_three_brokers_with_slaves_are_valid_kubernetes(objects: list[dict], kube: str) -> None:
    for obj in objects:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue
        kubernetes_validate.validate(obj, kube, strict=True)


def test_lint_is_clean_with_three_brokers() -> None:
    report = _lint(VALUES)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_each_broker_is_a_statefulset_of_its_master_and_slaves(objects: list[dict]) -> None:
    names = {o["metadata"]["name"] for o in by_kind(objects, "StatefulSet")}
    assert names == {*BROKERS, f"{FULLNAME}-namesrv"}
    labels = set()
    for name in BROKERS:
        spec = named(objects, "StatefulSet", name)["spec"]
        assert spec["replicas"] == 2  # the master and one slave
        assert spec["serviceName"] == f"{name}-headless"
        selector = spec["selector"]["matchLabels"]
        assert selector["rmqstore.io/broker"] == name
        assert selector.items() <= spec["template"]["metadata"]["labels"].items()
        labels.add(tuple(sorted(selector.items())))
    assert len(labels) == 3  # no broker's selector takes another's pods


@pytest.mark.parametrize("container", ["remoting", "proxy", "query"])
def test_the_master_of_each_broker_registers_under_its_name(
    objects: list[dict], container: str, tmp_path: Path
) -> None:
    """Pod 0 of each broker is given the chart's name servers; its slave is not (it would
    replace its master's entries)."""
    bin_dir = _fake_python(tmp_path)
    for name in BROKERS:
        c = _containers(named(objects, "StatefulSet", name))[container]
        assert _flag(c["args"], "--broker-name") == name
        assert "--namesrv" not in c["args"]
        assert _flag(c["args"], "--cluster-name") == "Orders"
        master = _exec_line(c, f"{name}-0", bin_dir)
        assert master == [*c["args"], "--namesrv", NAMESRV]
        assert _exec_line(c, f"{name}-1", bin_dir) == c["args"]


def test_each_broker_announces_its_own_addresses(objects: list[dict]) -> None:
    for name in BROKERS:
        c = _containers(named(objects, "StatefulSet", name))
        assert _flag(c["proxy"]["args"], "--advertise") == f"{name}.{NAMESPACE}.svc:8081"
        assert _flag(c["query"]["args"], "--advertise") == "$(POD_IP):8101"
        assert _flag(c["query"]["args"], "--store-host") == "$(POD_IP):10911"
        writer = c["commitlog"]["command"][2]
        assert f"--ha-master {name}-0.{name}-headless.{NAMESPACE}.svc:10912" in writer
        assert _flag(c["commitlog"]["args"], "--cluster-name") == "Orders"


def test_each_broker_has_its_services_and_the_release_an_access_point(
    objects: list[dict],
) -> None:
    services = {s["metadata"]["name"]: s["spec"] for s in by_kind(objects, "Service")}
    for name in BROKERS:
        client = services[name]
        assert client["selector"]["rmqstore.io/broker"] == name
        assert client["selector"]["statefulset.kubernetes.io/pod-name"] == f"{name}-0"
        assert {p["name"] for p in client["ports"]} == {"grpc-proxy", "remoting"}
        headless = services[f"{name}-headless"]
        assert headless["clusterIP"] == "None"
        assert headless["selector"]["rmqstore.io/broker"] == name
        assert "ha" in {p["name"] for p in headless["ports"]}
    access = services[FULLNAME]
    assert "rmqstore.io/broker" not in access["selector"]
    assert access["selector"]["statefulset.kubernetes.io/pod-name"] == f"{BROKERS[0]}-0"
    assert {f"{FULLNAME}-namesrv", f"{FULLNAME}-namesrv-headless"} <= set(services)
    assert len(services) == 1 + 2 * len(BROKERS) + 2


def test_without_slaves_the_access_point_takes_every_broker() -> None:
    objects = render({"brokers": 2})
    access = named(objects, "Service", FULLNAME)["spec"]["selector"]
    assert "statefulset.kubernetes.io/pod-name" not in access
    sts = named(objects, "StatefulSet", f"{FULLNAME}-broker-1")
    c = _containers(sts)
    assert _flag(c["query"]["args"], "--namesrv") == NAMESRV  # one pod: no role command
    assert c["query"]["command"] == ["python"]


def test_one_broker_keeps_the_names_of_a_single_store() -> None:
    objects = render({"brokers": 1})
    names = {o["metadata"]["name"] for o in by_kind(objects, "StatefulSet")}
    assert names == {FULLNAME, f"{FULLNAME}-namesrv"}
    sts = named(objects, "StatefulSet", FULLNAME)
    assert "rmqstore.io/broker" not in sts["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize("values, reason", [
    ({"proxy": {"advertise": "mq.example:8081"}}, "proxy.advertise cannot be set"),
    ({"remoting": {"brokerIp": "10.0.0.5"}}, "remoting.brokerIp cannot be set"),
    ({"namesrv": {"enabled": False}}, "register with name servers"),
    ({"rebuild": {"enabled": True, "existingClaim": "mine"}}, "each broker's Job mounts its own"),
], ids=["advertise", "broker-ip", "no-namesrv", "rebuild-claim"])  # fmt: skip
def test_what_one_broker_would_share_with_the_others_is_refused(values: dict, reason: str
                                                                ) -> None:  # fmt: skip
    import helm_python as helm

    with pytest.raises(helm.HelmError, match=reason):
        render({"brokers": 3, **values})


def test_lint_refuses_zero_brokers() -> None:
    assert "brokers" in "".join(_lint({"brokers": 0})["errors"])


def _selects(selector: dict, labels: dict) -> bool:
    return selector.items() <= labels.items()


@pytest.mark.parametrize("brokers", [1, 3])
def test_each_broker_is_rebuilt_by_a_job_on_its_masters_volume(brokers: int) -> None:
    """One Job per broker, named for it, mounting its master's (pod 0's) claim and required
    on that pod's node (a ReadWriteOnce volume is usable only there)."""
    objects = render({**VALUES, "brokers": brokers})
    names = BROKERS if brokers > 1 else [FULLNAME]
    jobs = {j["metadata"]["name"]: j["spec"]["template"] for j in by_kind(objects, "Job")}
    assert set(jobs) == {f"{name}-rebuild-1" for name in names}
    for name in names:
        pod = jobs[f"{name}-rebuild-1"]
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["data"]["persistentVolumeClaim"]["claimName"] == f"data-{name}-0"
        [term] = pod["spec"]["affinity"]["podAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]
        master = named(objects, "StatefulSet", name)["spec"]["template"]["metadata"]["labels"]
        wanted = term["labelSelector"]["matchLabels"]
        assert wanted.pop("statefulset.kubernetes.io/pod-name") == f"{name}-0"
        assert _selects(wanted, master) and term["topologyKey"] == "kubernetes.io/hostname"
        assert [c["args"][:3] for c in pod["spec"]["containers"]] == [
            ["rebuild", "--store", "/data/store"]]
        # no Service, StatefulSet or disruption budget of any broker takes the Job's pod
        for kind in ("StatefulSet", "PodDisruptionBudget"):
            for obj in by_kind(objects, kind):
                assert not _selects(obj["spec"]["selector"]["matchLabels"],
                                    pod["metadata"]["labels"]), obj["metadata"]["name"]
        for svc in by_kind(objects, "Service"):
            assert not _selects(svc["spec"]["selector"], pod["metadata"]["labels"])


def test_each_broker_group_has_its_own_disruption_budget(objects: list[dict]) -> None:
    """A drain may take one pod of every group at once, never two of one group."""
    budgets = {p["metadata"]["name"]: p["spec"] for p in by_kind(objects, "PodDisruptionBudget")}
    assert set(budgets) == {*BROKERS, f"{FULLNAME}-namesrv"}
    for name in BROKERS:
        assert budgets[name]["maxUnavailable"] == 1
        for sts in by_kind(objects, "StatefulSet"):
            labels = sts["spec"]["template"]["metadata"]["labels"]
            assert _selects(budgets[name]["selector"]["matchLabels"], labels) == (
                sts["metadata"]["name"] == name)
    namesrv = named(objects, "StatefulSet", f"{FULLNAME}-namesrv")["spec"]["template"]
    assert _selects(budgets[f"{FULLNAME}-namesrv"]["selector"]["matchLabels"],
                    namesrv["metadata"]["labels"])
    assert budgets[f"{FULLNAME}-namesrv"]["maxUnavailable"] == 1
    no_slaves = render({"brokers": 3})
    assert [p["metadata"]["name"] for p in by_kind(no_slaves, "PodDisruptionBudget")] == [
        f"{FULLNAME}-namesrv"]  # a group of one pod: nothing to keep up


@pytest.mark.parametrize("brokers, brokerName, named_as", [
    (3, "", BROKERS),
    (3, "bk", ["bk-0", "bk-1", "bk-2"]),
    (1, "", [FULLNAME]),
    (1, "bk", ["bk"]),
], ids=["3", "3-named", "1", "1-named"])  # fmt: skip
def test_the_service_monitor_labels_each_series_with_its_broker(
    brokers: int, brokerName: str, named_as: list[str]  # noqa: N803
) -> None:
    """``broker``, the dashboard's broker variable: the name each broker registers under."""
    objects = render({**VALUES, "brokers": brokers, "remoting": {"brokerName": brokerName}})
    monitor = named(objects, "ServiceMonitor", FULLNAME)["spec"]
    for endpoint in monitor["endpoints"]:
        rules = [r for r in endpoint["relabelings"] if r["targetLabel"] == "broker"]
        assert [r["replacement"] for r in rules] == named_as
        if brokers == 1:
            assert rules == [{"targetLabel": "broker", "replacement": named_as[0]}]
            continue
        for rule, sts in zip(rules, BROKERS, strict=True):
            assert rule["sourceLabels"] == ["__meta_kubernetes_pod_label_rmqstore_io_broker"]
            assert rule["regex"] == sts
            pods = named(objects, "StatefulSet", sts)["spec"]["template"]["metadata"]["labels"]
            assert pods["rmqstore.io/broker"] == sts
    remoting = next(c for c in _containers(named(objects, "StatefulSet", (
        BROKERS if brokers > 1 else [FULLNAME])[-1])).values() if c["name"] == "remoting")
    assert _flag(remoting["args"], "--broker-name") == named_as[-1]
