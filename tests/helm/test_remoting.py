"""The RocketMQ 4.x side of the chart: the name server's StatefulSet and Service on 9876, the
remoting broker in the broker's pod on 10911 registering with it at the pod's IP (the writer's
store host then), only pod 0 registering under replication, and who may reach both ports."""

import kubernetes_validate
import pytest

from tests.helm.conftest import ALL_ON, NAMESPACE, RELEASE, broker_sts, by_kind, named, render
from tests.helm.test_chart import KUBE_VERSIONS, _arg, _containers, _lint
from tests.helm.test_replication import _exec_line, _fake_python

FULLNAME = f"{RELEASE}-rmqstore"
NAMESRV = f"{FULLNAME}-namesrv"
NAMESRV_ADDRESS = ";".join(f"{NAMESRV}-{i}.{NAMESRV}-headless.{NAMESPACE}.svc:9876"
                           for i in range(2))
REPLICATED = {"replication": {"slaves": 2}}
POLICY = {"networkPolicy": {"enabled": True, "grpcFrom": ALL_ON["networkPolicy"]["grpcFrom"],
                            "metricsFrom": ALL_ON["networkPolicy"]["metricsFrom"]}}


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
@pytest.mark.parametrize("values", [{}, REPLICATED, {**REPLICATED, **POLICY}],
                         ids=["defaults", "replicated", "replicated-policy"])
def test_objects_are_valid_kubernetes(values: dict, kube: str) -> None:
    objects = render(values)
    assert named(objects, "StatefulSet", NAMESRV)["metadata"]["name"] == NAMESRV
    for obj in objects:
        kubernetes_validate.validate(obj, kube, strict=True)


def test_lint_is_clean_with_slaves_and_policy() -> None:
    report = _lint({**REPLICATED, **POLICY})
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("values", [
    {"namesrv": {"replicas": -1}}, {"namesrv": {"port": 0}}, {"namesrv": {"replica": 2}},
    {"remoting": {"port": 70000}}, {"remoting": {"brokerIP": "1.2.3.4"}},
    {"remoting": {"maxPendingSends": 0}}, {"cluster": {"name": ""}},
    {"remoting": {"brokerIp": "broker.example"}},
], ids=["negative-replicas", "port-zero", "misspelt-namesrv", "port-high", "misspelt-remoting",
        "no-pending", "empty-cluster", "broker-ip-a-name"])
def test_lint_refuses_bad_values(values: dict) -> None:
    report = _lint(values)
    assert f"/{next(iter(values))}" in "".join(report["errors"])


def test_name_server_is_two_stateless_pods_behind_9876(default_objects: list[dict]) -> None:
    namesrv = named(default_objects, "StatefulSet", NAMESRV)
    assert namesrv["spec"]["replicas"] == 2
    pod = namesrv["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"][:2] == ["-m", "services.namesrv"]
    assert _arg(c, "--listen") == "0.0.0.0:9876" and _arg(c, "--broker-expiry") == "120"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"namesrv": 9876, "metrics-namesrv": 8118}
    assert _arg(c, "--metrics-port") == "8118"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["tcpSocket"] == {"port": 9876}  # no gRPC health on a name server
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    # stateless: no store volume, a writable /tmp only
    assert [m["name"] for m in c["volumeMounts"]] == ["tmp"]
    assert [v["name"] for v in pod["volumes"]] == ["tmp"]
    service = named(default_objects, "Service", NAMESRV)
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "namesrv": 9876, "metrics-namesrv": 8118}  # fmt: skip
    assert service["spec"]["selector"].items() <= namesrv["spec"]["template"]["metadata"][
        "labels"].items()  # fmt: skip
    # its pods carry no label set any selector of the broker matches
    broker = broker_sts(default_objects)["spec"]["selector"]["matchLabels"]
    assert not broker.items() <= namesrv["spec"]["template"]["metadata"]["labels"].items()
    pdb = named(default_objects, "PodDisruptionBudget", NAMESRV)["spec"]
    assert pdb["maxUnavailable"] == 1  # a drain takes one name server at a time
    assert pdb["selector"]["matchLabels"].items() <= namesrv["spec"]["template"]["metadata"][
        "labels"].items()  # fmt: skip
    assert not by_kind(render({"namesrv": {"replicas": 1}}), "PodDisruptionBudget")
    # stable DNS names for its pods: the broker registers with each
    assert namesrv["spec"]["serviceName"] == f"{NAMESRV}-headless"
    assert namesrv["spec"]["podManagementPolicy"] == "Parallel"
    assert "volumeClaimTemplates" not in namesrv["spec"]
    headless = named(default_objects, "Service", f"{NAMESRV}-headless")["spec"]
    assert headless["clusterIP"] == "None" and headless["selector"] == service["spec"]["selector"]
    scaled = render({"namesrv": {"replicas": 3}, "tls": {"enabled": True, "secretName": "t"}})
    assert named(scaled, "StatefulSet", NAMESRV)["spec"]["replicas"] == 3
    assert _arg(_containers(scaled)["remoting"], "--namesrv").split(";") == [
        f"{NAMESRV}-{i}.{NAMESRV}-headless.{NAMESPACE}.svc:9876" for i in range(3)]
    # it serves no TLS and needs no Secret volume
    (c,) = named(scaled, "StatefulSet", NAMESRV)["spec"]["template"]["spec"]["containers"]
    assert not any(e["name"].startswith("RMQSTORE_TLS") for e in c["env"])
    off = render({"namesrv": {"enabled": False}})
    assert [s["metadata"]["name"] for s in by_kind(off, "StatefulSet")] == [FULLNAME]
    assert NAMESRV not in {s["metadata"]["name"] for s in by_kind(off, "Service")}
    assert "--namesrv" not in _containers(off)["remoting"]["args"]  # registers nowhere


def test_remoting_broker_registers_at_the_pod_ip(default_objects: list[dict]) -> None:
    containers = _containers(default_objects)
    c = containers["remoting"]
    assert c["command"] == ["python"] and c["args"][:2] == ["-m", "services.remoting"]
    assert _arg(c, "--listen") == "0.0.0.0:10911"
    assert _arg(c, "--store") == _arg(containers["commitlog"], "--store")  # pulls read its files
    # each name server pod by its DNS name: one connection to the Service would reach one
    assert _arg(c, "--namesrv") == NAMESRV_ADDRESS
    assert _arg(c, "--broker-ip") == "$(POD_IP)"
    assert _arg(c, "--broker-name") == FULLNAME
    assert _arg(c, "--cluster-name") == "DefaultCluster"
    assert _arg(c, "--commitlog") == "127.0.0.1:8100" and _arg(c, "--query") == "127.0.0.1:8101"
    assert "--ha-address" not in c["args"]  # no HA listener without slaves
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in (
        c["env"])  # fmt: skip
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {
        "remoting": 10911, "metrics-remote": 8117}  # fmt: skip
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["tcpSocket"] == {"port": 10911}
    # the writer records the address the broker registers: offset message ids reach it
    assert _arg(containers["commitlog"], "--store-host") == "$(POD_IP):10911"
    assert _arg(containers["commitlog"], "--cluster-name") == "DefaultCluster"


def test_broker_ip_name_and_cluster_values_reach_both(all_on_objects: list[dict]) -> None:
    containers = _containers(all_on_objects)
    c = containers["remoting"]
    assert _arg(c, "--broker-ip") == "10.0.0.5" and _arg(c, "--broker-name") == "broker-a"
    assert _arg(c, "--cluster-name") == "OrdersCluster"
    assert "--no-auto-create-topics" in c["args"] and c["args"][-2:] == ["--log-level", "DEBUG"]
    values = {"remoting": {"brokerIp": "203.0.113.7", "port": 20911,
                           "namesrv": "ns1:9876;ns2:9876"}}  # fmt: skip
    mine = _containers(render(values))
    assert _arg(mine["commitlog"], "--store-host") == "203.0.113.7:20911"
    assert _arg(mine["remoting"], "--listen") == "0.0.0.0:20911"
    assert _arg(mine["remoting"], "--namesrv") == "ns1:9876;ns2:9876"
    # commitlog.storeHost still wins over both
    assert _arg(containers["commitlog"], "--store-host") == ALL_ON["commitlog"]["storeHost"]


def test_read_only_store_runs_no_remoting_broker() -> None:
    objects = render({"readOnly": True})
    assert "remoting" not in _containers(objects)
    assert _arg(_containers(objects)["commitlog"], "--store-host") == "$(POD_IP):8100"


def test_only_pod_0_registers_under_replication(tmp_path) -> None:
    objects = render(REPLICATED)
    remoting = _containers(objects)["remoting"]
    bin_dir = _fake_python(tmp_path)
    master = _exec_line(remoting, f"{FULLNAME}-0", bin_dir)
    slave = _exec_line(remoting, f"{FULLNAME}-1", bin_dir)
    assert master[:2] == slave[:2] == ["-m", "services.remoting"]
    # the remoting broker registers as brokerId 0: a slave registering would replace the
    # master's address in the routes, so a slave's listens unregistered
    assert _arg({"args": master}, "--namesrv") == NAMESRV_ADDRESS
    assert "--namesrv" not in slave
    for line in (master, slave):
        assert _arg({"args": line}, "--ha-address") == "$(POD_IP):10912"
        assert _arg({"args": line}, "--broker-ip") == "$(POD_IP)"
    client = named(objects, "Service", FULLNAME)["spec"]
    assert client["selector"]["statefulset.kubernetes.io/pod-name"] == f"{FULLNAME}-0"
    assert {p["name"]: p["port"] for p in client["ports"]}["remoting"] == 10911


def test_access_keys_make_the_remoting_broker_take_only_signed_requests() -> None:
    keys = {"proxy": {"accessKey": "AK", "secretKeySecret": "keys"}}
    remoting = _containers(render(keys))["remoting"]
    args = remoting["args"]
    assert "--acl" in args and args[args.index("--access-key") + 1] == "AK"
    secret_file = args[args.index("--secret-key-file") + 1]
    mounts = {m["mountPath"]: m["name"] for m in remoting["volumeMounts"]}
    assert any(secret_file.startswith(path) and name == "access-key"
               for path, name in mounts.items())  # fmt: skip
    assert "remoting" not in _containers(render({**keys, "remoting": {"enabled": False}}))
    allowed = _containers(render({**keys, "remoting": {"allowUnauthenticated": True}}))
    assert "--acl" not in allowed["remoting"]["args"]  # the key still signs its proxy calls
    assert _arg(allowed["remoting"], "--access-key") == "AK"
    assert "--acl" not in _containers(render({}))["remoting"]["args"]


def test_the_remoting_broker_keeps_4x_offsets_at_the_proxy_of_its_pod() -> None:
    """The proxy owns consumer progress: without it the broker answers offset commits
    SYSTEM_ERROR."""
    containers = _containers(render({}))
    port = containers["proxy"]["ports"][0]["containerPort"]
    assert _arg(containers["remoting"], "--proxy") == f"127.0.0.1:{port}"
    no_proxy = _containers(render({"proxy": {"enabled": False}}))
    assert "--proxy" not in no_proxy["remoting"]["args"]


def test_network_policies_open_remoting_and_the_name_server_to_grpc_from() -> None:
    objects = render(POLICY)
    grpc_from = POLICY["networkPolicy"]["grpcFrom"]
    broker = named(objects, "NetworkPolicy", FULLNAME)["spec"]
    [clients] = [r for r in broker["ingress"]
                 if {"port": "remoting", "protocol": "TCP"} in r["ports"]]  # fmt: skip
    assert {p["port"] for p in clients["ports"]} == {"grpc-proxy", "remoting"}
    assert clients["from"] == grpc_from
    policy = named(objects, "NetworkPolicy", NAMESRV)["spec"]
    deployment = named(objects, "StatefulSet", NAMESRV)["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= deployment.items()
    [names, metrics] = policy["ingress"]
    assert names["ports"] == [{"port": "namesrv", "protocol": "TCP"}]
    # the broker's pods register; clients and mqadmin from grpcFrom
    sts_labels = broker_sts(objects)["spec"]["selector"]["matchLabels"]
    assert names["from"] == [{"podSelector": {"matchLabels": sts_labels}}, *grpc_from]
    assert metrics["ports"] == [{"port": "metrics-namesrv", "protocol": "TCP"}]
    assert metrics["from"] == POLICY["networkPolicy"]["metricsFrom"]
    open_to_all = named(render({"networkPolicy": {"enabled": True}}), "NetworkPolicy", NAMESRV)
    assert {"podSelector": {}} in open_to_all["spec"]["ingress"][0]["from"]


def test_service_monitor_scrapes_the_name_server_and_remoting(all_on_objects: list[dict]) -> None:
    monitor = named(all_on_objects, "ServiceMonitor", NAMESRV)["spec"]
    service = named(all_on_objects, "Service", NAMESRV)
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["endpoints"]] == ["metrics-namesrv"]
    assert monitor["namespaceSelector"]["matchNames"] == [NAMESPACE]
    broker = named(all_on_objects, "ServiceMonitor", FULLNAME)["spec"]
    assert "metrics-remote" in {e["port"] for e in broker["endpoints"]}
    headless = named(all_on_objects, "Service", f"{FULLNAME}-headless")
    assert {"remoting", "metrics-remote"} <= {p["name"] for p in headless["spec"]["ports"]}


def test_notes_give_4x_clients_the_name_server_and_say_what_the_port_takes() -> None:
    import helm_python as helm

    from tests.helm.conftest import CHART

    helm.disable_logging()
    chart = helm.Chart.load(CHART)
    for values, broker in (({}, f"pod {FULLNAME}-0's IP:10911"),
                           ({"remoting": {"brokerIp": "203.0.113.7"}}, "203.0.113.7:10911")):
        manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
        notes = next(t for k, t in manifests.items() if k.endswith("NOTES.txt"))
        assert f"namesrvAddr {NAMESRV}.{NAMESPACE}.svc:9876" in notes
        assert f"to the broker at {broker}" in notes and "takes unsigned requests" in notes
    keys = {"proxy": {"accessKey": "AK", "secretKeySecret": "keys"}}
    manifests = chart.render(keys, name=RELEASE, namespace=NAMESPACE, is_install=True)
    notes = next(t for k, t in manifests.items() if k.endswith("NOTES.txt"))
    assert "takes only requests signed with access key AK" in notes


def test_name_server_settings_restart_the_broker_only_when_its_addresses_change() -> None:
    def template(namesrv: dict) -> dict:
        return broker_sts(render({"namesrv": namesrv}))["spec"]["template"]

    plain = template({})
    assert template({"resources": {"limits": {"memory": "2Gi"}}, "brokerExpirySeconds": 60}) == (
        plain)  # fmt: skip
    assert template({"replicas": 3}) != plain  # one name server more to register with


def test_an_acl_secret_is_mounted_and_read_as_plain_acl_yml() -> None:
    """``remoting.aclSecret``: the Secret mounted as a directory (its updates reach the pod)
    and the broker given the file; without it, neither."""
    remoting = _containers(render({"remoting": {"aclSecret": "rmq-acl"}}))["remoting"]
    acl_file = _arg(remoting, "--acl-file")
    mounts = {m["name"]: m for m in remoting["volumeMounts"]}
    assert acl_file == mounts["remoting-acl"]["mountPath"] + "/plain_acl.yml"
    assert "subPath" not in mounts["remoting-acl"] and mounts["remoting-acl"]["readOnly"]
    pod = named(render({"remoting": {"aclSecret": "rmq-acl"}}), "StatefulSet",
                FULLNAME)["spec"]["template"]["spec"]  # fmt: skip
    (volume,) = [v for v in pod["volumes"] if v["name"] == "remoting-acl"]
    assert volume["secret"]["secretName"] == "rmq-acl"
    assert volume["secret"]["items"] == [{"key": "plain_acl.yml", "path": "plain_acl.yml"}]
    plain = _containers(render({}))["remoting"]
    assert "--acl-file" not in plain["args"]
    assert "remoting-acl" not in {m["name"] for m in plain["volumeMounts"]}


def test_an_acl_secret_with_unsigned_requests_allowed_does_not_render() -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmError, match="allowUnauthenticated and remoting.aclSecret go "
                                             "against each other"):  # fmt: skip
        render({"remoting": {"aclSecret": "rmq-acl", "allowUnauthenticated": True}})
