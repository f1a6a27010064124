"""Render the Helm chart offline with Helm's own engine (helm-python-sdk, no helm binary)."""

from pathlib import Path
from typing import Any

import pytest
import yaml

CHART = Path(__file__).resolve().parents[2] / "helm" / "rmqstore"
RELEASE = "store"
NAMESPACE = "mq"

# Every switch and optional block of values.yaml turned on or filled in.
ALL_ON: dict[str, Any] = {
    "image": {"repository": "registry.example/rmqstore", "tag": "1.2.3", "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "regcred"}],
    "replicas": 1,
    "persistence": {
        "enabled": True,
        "storageClassName": "fast-ssd",
        "size": "200Gi",
        "annotations": {"backup.example/enabled": "true"},
    },
    "serviceAccount": {"create": True, "name": "rmq", "annotations": {"iam.example/role": "x"}},
    "podAnnotations": {"team": "messaging"},
    "podLabels": {"tier": "storage"},
    "nodeSelector": {"disktype": "ssd"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "mq",
                     "effect": "NoSchedule"}],
    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100,
        "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app.kubernetes.io/name":
                                                              "rmqstore"}}}}]}},
    "priorityClassName": "high",
    "tls": {"enabled": True, "secretName": "rmqstore-tls", "serverName": "rmqstore.mq.svc"},
    "commitlog": {"flush": "sync", "storeHost": "10.0.0.5:10911",
                  "extraArgs": ["--warmup"]},
    "consumeQueue": {"extraArgs": ["--log-level", "DEBUG"]},
    "index": {"extraArgs": ["--log-level", "DEBUG"]},
    "query": {"extraArgs": ["--log-level", "DEBUG"]},
    "cluster": {"name": "OrdersCluster"},
    "namesrv": {"replicas": 3, "brokerExpirySeconds": 90, "extraArgs": ["--log-level", "DEBUG"]},
    # the proxy takes access keys; the remoting broker has no ACL, so it must be let in
    "remoting": {"allowUnauthenticated": True, "brokerIp": "10.0.0.5", "brokerName": "broker-a",
                 "autoCreateTopics": False, "extraArgs": ["--log-level", "DEBUG"]},
    "extraEnv": [{"name": "TZ", "value": "UTC"}],
    "service": {"type": "LoadBalancer", "annotations": {"lb.example/internal": "true"},
                "exposeInternal": True},
    "proxy": {"accessKey": "AK", "secretKeySecret": "rmqstore-keys", "signatureWindowSeconds": 300},
    "metrics": {"enabled": True},
    "serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "prom"}},
    "prometheusRule": {"enabled": True, "labels": {"release": "prom"}},
    "grafanaDashboard": {"enabled": True, "namespace": "monitoring", "folder": "Messaging"},
    "networkPolicy": {
        "enabled": True,
        "grpcFrom": [{"namespaceSelector": {"matchLabels": {"team": "apps"}}}],
        "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
        "internalFrom": [{"podSelector": {"matchLabels": {"role": "rmqstore-tools"}}}],
    },
    "rebuild": {"enabled": True, "master": "spark://spark:7077", "extraArgs": ["--verbose"]},
}


def render(values: dict[str, Any] | None = None) -> list[dict]:
    """Every object the chart renders (NOTES.txt and empty documents left out)."""
    import helm_python as helm

    helm.disable_logging()  # it reports the symlinked dashboard and rules files at INFO
    chart = helm.Chart.load(CHART)
    manifests = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                doc.setdefault("metadata", {})
                objects.append(doc)
    return objects


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def named(objects: list[dict], kind: str, name: str) -> dict:
    found = [o for o in by_kind(objects, kind) if o["metadata"]["name"] == name]
    assert len(found) == 1, f"{len(found)} {kind} objects named {name}"
    return found[0]


def broker_sts(objects: list[dict]) -> dict:
    """The broker's StatefulSet (the name server has one too)."""
    return named(objects, "StatefulSet", f"{RELEASE}-rmqstore")


def one(objects: list[dict], kind: str) -> dict:
    found = by_kind(objects, kind)
    assert len(found) == 1, f"{len(found)} {kind} objects"
    return found[0]


@pytest.fixture(scope="session")
def default_objects() -> list[dict]:
    return render()


@pytest.fixture(scope="session")
def all_on_objects() -> list[dict]:
    return render(ALL_ON)
