"""The chart runs the console only when asked: behind a ClusterIP Service, with an optional
Ingress, never without authentication, reading the store read-only."""

import kubernetes_validate
import pytest

from tests.helm.conftest import RELEASE, broker_sts, by_kind, named, one, render
from tests.helm.test_chart import KUBE_VERSIONS, _arg, _containers

PROXY = {"console": {"enabled": True, "trustedProxies": ["10.0.0.0/8"],
                     "ingress": {"enabled": True, "className": "nginx",
                                 "host": "console.example", "tls": [
                                     {"hosts": ["console.example"], "secretName": "c-tls"}]}},
         "networkPolicy": {"enabled": True}}
BASIC = {"console": {"enabled": True, "auth": "basic", "usersSecret": "console-users"}}


def test_off_by_default(default_objects: list[dict]) -> None:
    assert "console" not in _containers(default_objects)
    assert not by_kind(default_objects, "Ingress")


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
@pytest.mark.parametrize("values", [PROXY, BASIC], ids=["proxy-header", "basic"])
def test_console_objects_are_valid_kubernetes(values: dict, kube: str) -> None:
    for obj in render(values):
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue
        kubernetes_validate.validate(obj, kube, strict=True)


def test_proxy_header_console_behind_service_and_ingress() -> None:
    objects = render(PROXY)
    c = _containers(objects)["console"]
    assert c["args"][:2] == ["-m", "services.console"]
    assert _arg(c, "--auth") == "proxy-header"
    assert _arg(c, "--trusted-proxy") == "10.0.0.0/8"
    assert _arg(c, "--listen") == "0.0.0.0:8105"
    assert _arg(c, "--query") == "127.0.0.1:8101"
    assert _arg(c, "--proxy") == "127.0.0.1:8081"  # the consumer group pages
    assert {m["name"]: m.get("readOnly") for m in c["volumeMounts"]}["data"] is True
    assert c["readinessProbe"]["httpGet"]["path"] == "/healthz"
    (svc,) = [s for s in by_kind(objects, "Service") if s["metadata"]["name"].endswith("-console")]
    assert svc["spec"]["type"] == "ClusterIP" and svc["spec"]["ports"][0]["port"] == 8105
    ingress = one(objects, "Ingress")
    rule = ingress["spec"]["rules"][0]
    assert rule["host"] == "console.example"
    assert rule["http"]["paths"][0]["backend"]["service"]["name"] == svc["metadata"]["name"]
    policy = named(objects, "NetworkPolicy", f"{RELEASE}-rmqstore")
    assert any(p["port"] == "http-console" for r in policy["spec"]["ingress"]
               for p in r["ports"])


@pytest.mark.parametrize("off", [{"proxy": {"enabled": False}}, {"readOnly": True}],
                         ids=["proxy-disabled", "read-only"])
def test_console_without_the_proxy_gets_no_proxy_flag(off: dict) -> None:
    c = _containers(render({**PROXY, **off}))["console"]
    assert "--proxy" not in c["args"]


def test_basic_auth_mounts_the_users_secret() -> None:
    objects = render(BASIC)
    c = _containers(objects)["console"]
    assert _arg(c, "--auth") == "basic"
    assert _arg(c, "--users-file") == "/etc/rmqstore/console/users"
    assert "--secure-cookie" not in c["args"]  # no TLS Ingress in front
    tls = {"console": {**BASIC["console"], "ingress": {"enabled": True, "tls": [
        {"hosts": ["c.example"], "secretName": "c-tls"}]}}}
    assert "--secure-cookie" in _containers(render(tls))["console"]["args"]
    volumes = broker_sts(objects)["spec"]["template"]["spec"]["volumes"]
    assert {"name": "console-users", "secret": {"secretName": "console-users",
                                                "defaultMode": 0o440}} in volumes


@pytest.mark.parametrize("console", [
    {"enabled": True, "auth": "none"},
    {"enabled": True, "auth": "basic"},
    {"enabled": True, "auth": "proxy-header"},
], ids=["auth-none", "basic-without-users", "proxy-without-proxies"])
def test_unsafe_console_settings_are_refused(console: dict) -> None:
    with pytest.raises(Exception, match="console|auth"):
        render({"console": console})
