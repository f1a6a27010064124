"""The Helm chart renders, lints and produces valid Kubernetes objects with defaults and with
every option on; the pod runs the four services the way the design says."""

import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.helm.conftest import (
    ALL_ON,
    CHART,
    NAMESPACE,
    RELEASE,
    broker_sts,
    by_kind,
    named,
    one,
    render,
)  # fmt: skip

ROOT = Path(__file__).resolve().parents[2]
FULLNAME = f"{RELEASE}-rmqstore"
# oldest Kubernetes the chart supports (native gRPC probes) and the newest schemas we have
KUBE_VERSIONS = ("1.27.0", kubernetes_validate.utils.latest_version())
CRD_GROUPS = ("monitoring.coreos.com/",)
SERVICE_MODULES = {
    "commitlog": ["-m", "services.commitlog"],
    "consume-queue": ["-m", "services.indexer", "consume-queue"],
    "index": ["-m", "services.indexer", "index"],
    "query": ["-m", "services.query"],
    "proxy": ["-m", "services.proxy"],
    "remoting": ["-m", "services.remoting"],
}
# the services that speak RocketMQ's remoting protocol: no gRPC port, no store (TCP probes)
REMOTING = {"remoting"}
MINIMAL = {
    "persistence": {"enabled": False},
    "metrics": {"enabled": False},
    "serviceMonitor": {"enabled": True},
    "grafanaDashboard": {"enabled": False},
    "serviceAccount": {"create": False},
    "query": {"enabled": False},
}


def _lint(values: dict) -> dict:
    import helm_python as helm

    return helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version="v1.27.0")


def _statefulset(objects: list[dict]) -> dict:
    return broker_sts(objects)


def _containers(objects: list[dict]) -> dict[str, dict]:
    return {c["name"]: c for c in _statefulset(objects)["spec"]["template"]["spec"]["containers"]}


def _arg(container: dict, flag: str) -> str:
    args = container["args"]
    return args[args.index(flag) + 1]


@pytest.mark.parametrize("values", [{}, ALL_ON, MINIMAL], ids=["defaults", "all-on", "minimal"])
def test_lint_is_clean(values: dict) -> None:
    report = _lint(values)
    assert report["errors"] == []
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert problems == []


@pytest.mark.parametrize(
    "values",
    [
        {"commitlog": {"flush": "sometimes"}},
        {"commitlog": {"grpcPort": 70000}},
        {"persistance": {"enabled": True}},
        {"query": {"enabled": "yes"}},
        {"proxy": {"maxDelay": "3 days"}},
    ],
    ids=["bad-flush", "port-out-of-range", "misspelt-key", "enabled-not-bool", "bad-delay"],
)
def test_lint_refuses_bad_values(values: dict) -> None:
    report = _lint(values)
    assert report["errors"] or any(m["severity"] >= 3 for m in report["messages"])


@pytest.mark.parametrize(
    "retention",
    [{"diskMaxUsedRatio": 101}, {"diskMaxUsedRatio": 0}, {"deleteWhen": 24},
     {"deleteWhen": "24"}, {"deleteWhen": "sometimes"}, {"hours": -1}, {"checkSeconds": 0},
     {"keepDays": 3}],
    ids=["ratio-over-100", "ratio-zero", "hour-24", "hour-24-string", "hour-word",
         "negative-hours", "check-zero", "misspelt-key"],
)  # fmt: skip
def test_lint_refuses_bad_retention(retention: dict) -> None:
    report = _lint({"commitlog": {"retention": retention}})
    assert "/commitlog/retention" in "".join(report["errors"])


@pytest.mark.parametrize("levels", ["", "1s 0s", "1x", "1s,5s", "-1s"])
def test_lint_refuses_bad_delay_levels(levels: str) -> None:
    report = _lint({"commitlog": {"delivery": {"delayLevels": levels}}})
    assert "/commitlog/delivery/delayLevels" in "".join(report["errors"])


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
@pytest.mark.parametrize("values", [{}, ALL_ON, MINIMAL], ids=["defaults", "all-on", "minimal"])
def test_every_object_is_valid_kubernetes(values: dict, kube: str) -> None:
    objects = render(values)
    assert objects
    for obj in objects:
        if obj["apiVersion"].startswith(CRD_GROUPS):
            continue  # no upstream schema offline; checked by the tests below
        try:
            kubernetes_validate.validate(obj, kube, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = "/".join(str(p) for p in e.absolute_path)
            pytest.fail(f"{obj['kind']}/{obj['metadata'].get('name')} {path}: {e.message}")


def test_strict_validation_catches_a_misspelt_field(default_objects: list[dict]) -> None:
    """The check above can fail: a field Kubernetes does not know is refused."""
    sts = json.loads(json.dumps(_statefulset(default_objects)))
    sts["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["grpcc"] = {"port": 1}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(sts, KUBE_VERSIONS[0], strict=True)


def test_defaults_render_the_expected_objects(default_objects: list[dict]) -> None:
    kinds = sorted(o["kind"] for o in default_objects)
    # the broker and the name server are StatefulSets; Services: client, headless, the name
    # server's client and headless; the name servers' PodDisruptionBudget
    assert kinds == ["ConfigMap", "PodDisruptionBudget", "Service", "Service", "Service",
                     "Service", "ServiceAccount", "StatefulSet", "StatefulSet"]
    assert all(o["metadata"]["name"].startswith(FULLNAME) for o in default_objects)


def test_all_on_renders_every_optional_object(all_on_objects: list[dict]) -> None:
    kinds = {o["kind"] for o in all_on_objects}
    assert kinds == {
        "ConfigMap", "Job", "NetworkPolicy", "PodDisruptionBudget", "PrometheusRule", "Service",
        "ServiceAccount", "ServiceMonitor", "StatefulSet",
    }


@pytest.mark.parametrize("values", [{}, ALL_ON], ids=["defaults", "all-on"])
def test_one_pod_runs_the_six_services_on_one_volume(values: dict) -> None:
    objects = render(values)
    containers = _containers(objects)
    assert list(containers) == list(SERVICE_MODULES)
    store = "/data/store"
    writer_port = containers["commitlog"]["ports"][0]["containerPort"]
    for name, c in containers.items():
        assert c["command"] == ["python"]
        assert c["args"][: len(SERVICE_MODULES[name])] == SERVICE_MODULES[name]
        if name not in REMOTING:  # all its reads and writes go through the writer and query
            assert _arg(c, "--store") == store
        port = next(p for p in c["ports"] if p["name"].startswith("grpc-") or p["name"] in REMOTING)
        assert _arg(c, "--listen") == f"0.0.0.0:{port['containerPort']}"
        metrics = next(p for p in c["ports"] if p["name"].startswith("metrics-"))
        assert _arg(c, "--metrics-port") == str(metrics["containerPort"])
        if name != "commitlog":
            assert _arg(c, "--commitlog") == f"127.0.0.1:{writer_port}"
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        assert mounts["data"]["mountPath"] == "/data"
        # the proxy writes its consumer groups' files under config/
        assert mounts["data"].get("readOnly", False) is (name in ("query", "remoting"))
    sts = _statefulset(objects)
    (init,) = sts["spec"]["template"]["spec"]["initContainers"]
    assert init["command"][-1] == store and init["image"] == containers["query"]["image"]
    claim = sts["spec"]["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "data"
    assert "data" not in {v["name"] for v in sts["spec"]["template"]["spec"]["volumes"]}


def test_large_numbers_render_as_integers(default_objects: list[dict]) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    writer = _containers(default_objects)["commitlog"]
    assert _arg(writer, "--commitlog-segment-size") == str(values["commitlog"]["segmentSize"])
    assert _arg(writer, "--max-message-size") == str(values["commitlog"]["maxMessageSize"])


def test_writer_options_reach_its_command_line(all_on_objects: list[dict]) -> None:
    writer = _containers(all_on_objects)["commitlog"]
    assert _arg(writer, "--flush") == "sync"
    assert _arg(writer, "--store-host") == "10.0.0.5:10911"
    assert writer["args"][-1] == "--warmup"
    default_writer = _containers(render())["commitlog"]
    # records and offset message ids carry the remoting broker's address (as `rmqstore serve`)
    assert _arg(default_writer, "--store-host") == "$(POD_IP):10911"
    assert _arg(default_writer, "--cluster-name") == "DefaultCluster"
    assert _arg(writer, "--cluster-name") == "OrdersCluster"
    no_remoting = _containers(render({"remoting": {"enabled": False}}))["commitlog"]
    assert _arg(no_remoting, "--store-host") == "$(POD_IP):8100"
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in (
        default_writer["env"]
    )


def test_writer_runs_delivery_and_retention_with_rocketmq_defaults(
    default_objects: list[dict],
) -> None:
    writer = _containers(default_objects)["commitlog"]
    assert _arg(writer, "--delay-levels") == (
        "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    )
    assert float(_arg(writer, "--retention-hours")) == 72
    assert _arg(writer, "--delete-when") == "4"
    assert float(_arg(writer, "--disk-max-used-ratio")) == 75
    assert float(_arg(writer, "--retention-check-seconds")) == 10
    assert "--no-delivery" not in writer["args"]


def test_delivery_and_retention_values_reach_the_writer() -> None:
    values = {"commitlog": {
        "delivery": {"enabled": False, "delayLevels": "1s 2s 3s"},
        "retention": {"hours": 0.5, "deleteWhen": "always", "diskMaxUsedRatio": 90.5,
                      "checkSeconds": 2},
    }}  # fmt: skip
    writer = _containers(render(values))["commitlog"]
    assert _arg(writer, "--delay-levels") == "1s 2s 3s"
    assert _arg(writer, "--retention-hours") == "0.5"
    assert _arg(writer, "--delete-when") == "always"
    assert _arg(writer, "--disk-max-used-ratio") == "90.5"
    assert _arg(writer, "--retention-check-seconds") == "2"
    assert "--no-delivery" in writer["args"]
    assert _lint(values)["errors"] == []
    hour = _containers(render({"commitlog": {"retention": {"deleteWhen": 23}}}))["commitlog"]
    assert _arg(hour, "--delete-when") == "23"


@pytest.mark.parametrize("values", [{}, ALL_ON], ids=["defaults", "all-on"])
def test_probes_are_native_grpc_on_each_container_port(values: dict) -> None:
    # Kubernetes' gRPC probes speak plaintext only: with TLS on they check the TCP port
    tls = values.get("tls", {}).get("enabled")
    for name, c in _containers(render(values)).items():
        # the remoting protocol's services serve no gRPC health: a TCP check
        check = "tcpSocket" if tls or name in REMOTING else "grpc"
        port = next(p["containerPort"] for p in c["ports"]
                    if p["name"].startswith("grpc-") or p["name"] in REMOTING)  # fmt: skip
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert c[probe][check] == {"port": port}, (name, probe)
            assert {"grpc", "tcpSocket", "httpGet"} & set(c[probe]) == {check}
        startup = c["startupProbe"]
        # recovery of a large commitlog may take long: at least 30 minutes before liveness
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800


def test_tls_mounts_the_secret_and_configures_every_service(all_on_objects: list[dict]) -> None:
    pod = _statefulset(all_on_objects)["spec"]["template"]["spec"]
    tls_volume = next(v for v in pod["volumes"] if v["name"] == "tls")
    assert tls_volume["secret"]["secretName"] == ALL_ON["tls"]["secretName"]
    for name, c in _containers(all_on_objects).items():
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["RMQSTORE_TLS_CERT"] == "/etc/rmqstore/tls/tls.crt", name
        assert env["RMQSTORE_TLS_KEY"] == "/etc/rmqstore/tls/tls.key", name
        assert env["RMQSTORE_TLS_CA"] == "/etc/rmqstore/tls/ca.crt", name
        assert env["RMQSTORE_TLS_SERVER_NAME"] == ALL_ON["tls"]["serverName"], name
        mount = next(m for m in c["volumeMounts"] if m["name"] == "tls")
        assert mount == {"name": "tls", "mountPath": "/etc/rmqstore/tls", "readOnly": True}
    assert not any(v["name"] == "tls" for v in
                   _statefulset(render({}))["spec"]["template"]["spec"]["volumes"])


@pytest.mark.parametrize("values", [{}, ALL_ON], ids=["defaults", "all-on"])
def test_pods_are_hardened(values: dict) -> None:
    objects = render(values)
    pods = [_statefulset(objects)["spec"]["template"]["spec"]]
    pods += [job["spec"]["template"]["spec"] for job in by_kind(objects, "Job")]
    for pod in pods:
        psc = pod["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0
        assert psc["seccompProfile"]["type"] == "RuntimeDefault"
        assert pod["automountServiceAccountToken"] is False
        for c in pod["containers"] + pod.get("initContainers", []):
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
        for c in pod["containers"]:  # a writable /tmp, the root filesystem being read-only
            assert "/tmp" in {m["mountPath"] for m in c["volumeMounts"]}


def test_container_ports_are_unique(all_on_objects: list[dict]) -> None:
    ports = [p for c in _containers(all_on_objects).values() for p in c["ports"]]
    assert len({p["containerPort"] for p in ports}) == len(ports)
    assert len({p["name"] for p in ports}) == len(ports)
    assert all(len(p["name"]) <= 15 for p in ports)  # IANA_SVC_NAME


def test_services_route_to_container_ports(all_on_objects: list[dict]) -> None:
    port_names = {p["name"] for c in _containers(all_on_objects).values() for p in c["ports"]}
    sts = _statefulset(all_on_objects)
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    services = {s["metadata"]["name"]: s for s in by_kind(all_on_objects, "Service")}
    headless = services[f"{FULLNAME}-headless"]
    assert sts["spec"]["serviceName"] == headless["metadata"]["name"]
    assert headless["spec"]["clusterIP"] == "None"
    assert {p["targetPort"] for p in headless["spec"]["ports"]} == port_names
    client = services[FULLNAME]
    assert {p["targetPort"] for p in client["spec"]["ports"]} == {
        "grpc-writer", "grpc-query", "grpc-proxy", "remoting"
    }
    namesrv = services.pop(f"{FULLNAME}-namesrv")
    services.pop(f"{FULLNAME}-namesrv-headless")
    for svc in services.values():
        assert svc["spec"]["selector"].items() <= pod_labels.items()
    # the name server's pods are its Service's only: no selector of the broker's takes them
    deployment = named(all_on_objects, "StatefulSet", f"{FULLNAME}-namesrv")["spec"]["template"]
    assert namesrv["spec"]["selector"].items() <= deployment["metadata"]["labels"].items()
    assert {p["targetPort"] for p in namesrv["spec"]["ports"]} == {
        p["name"] for p in deployment["spec"]["containers"][0]["ports"]}  # fmt: skip
    for svc in services.values():
        assert not svc["spec"]["selector"].items() <= deployment["metadata"]["labels"].items()


def test_service_monitor_scrapes_every_metrics_port(all_on_objects: list[dict]) -> None:
    monitor = named(all_on_objects, "ServiceMonitor", FULLNAME)
    assert monitor["metadata"]["labels"]["release"] == "prom"
    headless = named(all_on_objects, "Service", f"{FULLNAME}-headless")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= (
        headless["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    metrics_ports = {
        p["name"] for p in headless["spec"]["ports"] if p["name"].startswith("metrics")
    }
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == metrics_ports
    assert len(metrics_ports) == 6
    assert all(e["interval"] == "15s" and e["path"] == "/metrics"
               for e in monitor["spec"]["endpoints"])


def test_metrics_off_removes_ports_and_monitor() -> None:
    objects = render({"metrics": {"enabled": False}, "serviceMonitor": {"enabled": True}})
    assert not by_kind(objects, "ServiceMonitor")
    for c in _containers(objects).values():
        assert _arg(c, "--metrics-port") == "0"
        assert all(p["name"].startswith("grpc-") or p["name"] in REMOTING for p in c["ports"])


def test_disabled_services_leave_the_pod() -> None:
    objects = render({"query": {"enabled": False}, "index": {"enabled": False},
                      "proxy": {"enabled": False}, "remoting": {"enabled": False},
                      "namesrv": {"enabled": False}})  # fmt: skip
    assert list(_containers(objects)) == ["commitlog", "consume-queue"]
    ports = {p["name"] for s in by_kind(objects, "Service") for p in s["spec"]["ports"]}
    assert not {p for p in ports if "query" in p or "index" in p or "proxy" in p
                or "remoting" in p or "namesrv" in p}  # fmt: skip
    assert [s["metadata"]["name"] for s in by_kind(objects, "StatefulSet")] == [FULLNAME]


def test_without_persistence_the_store_is_an_empty_dir() -> None:
    sts = _statefulset(render({"persistence": {"enabled": False}}))
    assert "volumeClaimTemplates" not in sts["spec"]
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes["data"]


def test_dashboard_config_map_is_the_shipped_dashboard(all_on_objects: list[dict]) -> None:
    cm = one(all_on_objects, "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["annotations"]["grafana_folder"] == "Messaging"
    shipped = json.loads((ROOT / "deploy" / "grafana" / "rmqstore-dashboard.json").read_text())
    assert json.loads(cm["data"]["rmqstore-dashboard.json"]) == shipped


def test_prometheus_rule_is_the_shipped_rules_file(all_on_objects: list[dict]) -> None:
    rule = one(all_on_objects, "PrometheusRule")
    shipped = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rules.yml").read_text())
    assert rule["spec"]["groups"] == shipped["groups"]
    assert rule["metadata"]["labels"]["release"] == "prom"


def test_rendered_prometheus_rule_passes_promtool(
    all_on_objects: list[dict], tmp_path: Path
) -> None:
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus; make system-deps)")
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": one(all_on_objects, "PrometheusRule")["spec"][
        "groups"]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_rebuild_job_runs_the_spark_rebuild_next_to_the_store(all_on_objects: list[dict]) -> None:
    job = one(all_on_objects, "Job")
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (c,) = pod["containers"]
    assert c["command"] == ["rmqstore"]
    assert c["args"][:5] == ["rebuild", "--store", "/data/store", "--out", "/data/rebuild"]
    assert _arg(c, "--master") == "spark://spark:7077"
    assert c["image"] == "registry.example/rmqstore:1.2.3"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == f"data-{FULLNAME}-0"
    term = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["labelSelector"]["matchLabels"]["statefulset.kubernetes.io/pod-name"] == (
        f"{FULLNAME}-0"
    )


def test_network_policy_opens_only_service_ports(all_on_objects: list[dict]) -> None:
    policy = named(all_on_objects, "NetworkPolicy", FULLNAME)
    port_names = {p["name"] for c in _containers(all_on_objects).values() for p in c["ports"]}
    opened = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert opened == port_names


def test_service_exposes_the_rocketmq_protocol_on_8081(default_objects: list[dict]) -> None:
    client = named(default_objects, "Service", FULLNAME)
    ports = {p["name"]: p for p in client["spec"]["ports"]}
    assert ports["grpc-proxy"]["port"] == 8081 and ports["grpc-proxy"]["targetPort"] == "grpc-proxy"
    proxy = _containers(default_objects)["proxy"]
    assert _arg(proxy, "--advertise").endswith(".svc:8081")
    assert _arg(proxy, "--transaction-check-max") == "15"


def test_more_than_one_replica_is_refused_with_the_reason() -> None:
    import helm_python as helm

    for ok in (0, 1):
        assert broker_sts(render({"replicas": ok}))["spec"]["replicas"] == ok
    with pytest.raises(helm.HelmError, match="for more brokers set brokers") as caught:
        render({"replicas": 2})
    assert "replicas is 2" in str(caught.value)


def test_rebuild_job_passes_every_size_the_services_use() -> None:
    sizes = {"indexFile": {"slots": 1000, "entries": 4000},
             "consumeQueue": {"entriesPerFile": 7000},
             "rebuild": {"enabled": True}}
    (c,) = one(render(sizes), "Job")["spec"]["template"]["spec"]["containers"]
    assert (_arg(c, "--index-slots"), _arg(c, "--index-entries"),
            _arg(c, "--cq-entries-per-file")) == ("1000", "4000", "7000")
    # and the services run with the same ones
    containers = _containers(render(sizes))
    assert _arg(containers["index"], "--index-slots") == "1000"
    assert _arg(containers["consume-queue"], "--cq-entries-per-file") == "7000"


def test_read_only_serves_without_builders_or_writes() -> None:
    """``readOnly``: the writer only reads, no builders, no init container writing the
    store, every mount of the data volume read-only, sizes left to the store's files."""
    objects = render({"readOnly": True})
    pod = _statefulset(objects)["spec"]["template"]["spec"]
    containers = _containers(objects)
    assert sorted(containers) == ["commitlog", "query"]
    assert "initContainers" not in pod
    for c in containers.values():
        assert "--read-only" in c["args"], c["name"]
        assert all(m.get("readOnly") for m in c["volumeMounts"] if m["name"] == "data")
        assert not {"--commitlog-segment-size", "--index-slots"} & set(c["args"])
    # a read-only writer neither delivers nor deletes: those flags are not passed
    background = {"--delay-levels", "--no-delivery", "--retention-hours", "--delete-when",
                  "--disk-max-used-ratio", "--retention-check-seconds"}
    assert not background & set(containers["commitlog"]["args"])
    assert _lint({"readOnly": True})["errors"] == []


def test_the_proxy_puts_over_the_writers_socket_in_the_shared_tmp() -> None:
    containers = _containers(render({}))
    sock = _arg(containers["commitlog"], "--put-socket")
    assert sock.startswith("/tmp/") and _arg(containers["proxy"], "--commitlog-socket") == sock
    for name in ("commitlog", "proxy"):  # one emptyDir, mounted by both
        assert {"name": "tmp", "mountPath": "/tmp"} in containers[name]["volumeMounts"]
    off = _containers(render({"proxy": {"putSocket": False}, "remoting": {"putSocket": False}}))
    assert "--put-socket" not in off["commitlog"]["args"]
    assert "--commitlog-socket" not in off["proxy"]["args"]
    # the remoting broker puts over the same socket
    assert _arg(containers["remoting"], "--commitlog-socket") == sock
    assert _arg(_containers(render({"proxy": {"enabled": False}}))["commitlog"],
                "--put-socket") == sock  # fmt: skip
    assert "--put-socket" not in _containers(render({
        "proxy": {"enabled": False}, "remoting": {"enabled": False}}))["commitlog"]["args"]


def test_consumer_group_settings_reach_the_proxy() -> None:
    values = {"proxy": {"consumeFrom": "last", "groupRetryMaxTimes": 3, "fifoGroups": ["a", "b"]}}
    proxy = _containers(render(values))["proxy"]
    assert _arg(proxy, "--consume-from") == "last"
    assert _arg(proxy, "--group-retry-max-times") == "3"
    assert _arg(proxy, "--max-delay") == "3d"  # RocketMQ 5's timerMaxDelaySec by default
    args = proxy["args"]
    assert [args[i + 1] for i, a in enumerate(args) if a == "--fifo-group"] == ["a", "b"]


def _client_service(objects: list[dict]) -> dict:
    [client] = [o for o in by_kind(objects, "Service") if o["metadata"]["name"] == FULLNAME]
    return client


INTERNAL = {"grpc-writer", "grpc-query", "grpc-cq", "grpc-index"}  # no credentials taken


def test_services_expose_no_unauthenticated_port_by_default(default_objects: list[dict]) -> None:
    # the remoting broker has no ACL either, but it is what 4.x clients need (networkPolicy)
    assert {p["name"] for p in _client_service(default_objects)["spec"]["ports"]} == {
        "grpc-proxy", "remoting"}  # fmt: skip
    headless = named(default_objects, "Service", f"{FULLNAME}-headless")
    assert not {p["name"] for p in headless["spec"]["ports"]} & INTERNAL
    exposed = render({"service": {"exposeInternal": True}})
    assert {p["name"] for p in _client_service(exposed)["spec"]["ports"]} == {
        "grpc-proxy", "remoting", "grpc-writer", "grpc-query"}  # fmt: skip


def test_network_policy_keeps_the_unauthenticated_ports_closed() -> None:
    objects = render({"networkPolicy": {"enabled": True}, "console": {
        "enabled": True, "trustedProxies": ["10.0.0.0/8"]}})  # fmt: skip
    policy = named(objects, "NetworkPolicy", FULLNAME)
    opened = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert "grpc-proxy" in opened and "http-console" in opened and "metrics-writer" in opened
    assert not opened & INTERNAL
    tools = [{"podSelector": {"matchLabels": {"role": "tools"}}}]
    policy = named(render({"networkPolicy": {"enabled": True, "internalFrom": tools}}),
                   "NetworkPolicy", FULLNAME)  # fmt: skip
    [internal] = [r for r in policy["spec"]["ingress"]
                  if {p["port"] for p in r["ports"]} & INTERNAL]  # fmt: skip
    assert {p["port"] for p in internal["ports"]} == INTERNAL and internal["from"] == tools


def test_the_proxy_s_secret_key_is_a_file_from_a_secret(all_on_objects: list[dict]) -> None:
    proxy = _containers(all_on_objects)["proxy"]
    assert _arg(proxy, "--access-key") == "AK"
    path = _arg(proxy, "--secret-key-file")
    assert _arg(proxy, "--signature-window") == "300"
    mount = next(m for m in proxy["volumeMounts"] if m["name"] == "access-key")
    assert path.startswith(mount["mountPath"] + "/") and mount["readOnly"]
    volumes = _statefulset(all_on_objects)["spec"]["template"]["spec"]["volumes"]
    secret = next(v for v in volumes if v["name"] == "access-key")["secret"]
    assert secret["secretName"] == "rmqstore-keys"
    assert secret["items"] == [{"key": "secretKey", "path": path.rsplit("/", 1)[1]}]
    for name, c in _containers(all_on_objects).items():
        assert "--secret-key" not in c["args"], name
        assert not [e for e in c.get("env", []) if "SECRET" in e["name"]], name
    with_console = render({**ALL_ON, "console": {"enabled": True, "allowedHosts": ["c.example"],
                                                 "trustedProxies": ["10.0.0.0/8"]}})
    console = _containers(with_console)["console"]
    assert _arg(console, "--access-key") == "AK" and _arg(console, "--secret-key-file") == path
    assert _arg(console, "--allowed-host") == "c.example"
    assert "access-key" in {m["name"] for m in console["volumeMounts"]}


def test_an_access_key_without_its_secret_is_refused() -> None:
    with pytest.raises(Exception, match="proxy.secretKeySecret"):
        render({"proxy": {"accessKey": "AK"}})
