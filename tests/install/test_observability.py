"""The dashboard and alert rules only query metrics the controller and maas-api actually export."""

from __future__ import annotations

import json
import re

import yaml
from prometheus_client import CollectorRegistry

from maasctl.maasapi.metrics import ApiMetrics
from maasctl.runtime.metrics import Metrics
from tests.install.manifests import MANIFESTS, find, render

OBS = MANIFESTS / "observability"
METRIC = re.compile(r"\b((?:controller_runtime|workqueue|rest_client|leader_election|maas_api)_[a-z_]+)\b")
REQUIRED_ALERTS = {"MaaSControllerReconcileErrors", "MaaSControllerWorkqueueBacklog", "MaaSControllerLeaderChanges",
                   "MaaSControllerNoLeader", "MaaSApiHighLatency", "MaaSApiHighErrorRate",
                   "MaaSApiKeyValidationFailures", "MaaSControllerValidationFailures"}


def exported() -> set[str]:
    names: set[str] = set()
    for registry in (Metrics(CollectorRegistry()).registry, ApiMetrics(CollectorRegistry()).registry):
        for family in registry.collect():
            names.add(family.name)
            if family.type == "counter":
                names.add(f"{family.name}_total")
            if family.type == "histogram":
                names.update(f"{family.name}_{s}" for s in ("bucket", "sum", "count"))
    return names


def rule_exprs() -> dict[str, str]:
    rule = yaml.safe_load((OBS / "prometheusrule.yaml").read_text())
    return {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}


def dashboard_exprs() -> list[str]:
    dash = json.loads((OBS / "maasctl-dashboard.json").read_text())
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def test_alert_rules_cover_the_issue_and_use_exported_metrics() -> None:
    exprs = rule_exprs()
    assert set(exprs) >= REQUIRED_ALERTS
    known = exported()
    for alert, expr in exprs.items():
        used = set(METRIC.findall(expr))
        assert used, alert
        assert used <= known, (alert, used - known)


def test_dashboard_queries_use_exported_metrics() -> None:
    exprs = dashboard_exprs()
    assert len(exprs) >= 10
    known = exported()
    used = {m for e in exprs for m in METRIC.findall(e)}
    assert used <= known, used - known
    # Every family the code exports shows up somewhere (dashboard or alerts).
    everywhere = used | {m for e in rule_exprs().values() for m in METRIC.findall(e)}
    families = {re.sub(r"_(bucket|sum|count)$", "", m) for m in everywhere}
    assert {"controller_runtime_reconcile_errors_total", "workqueue_depth", "leader_election_master_status",
            "maas_api_http_request_duration_seconds", "maas_api_key_validation_total"} <= families


def test_observability_kustomization_renders() -> None:
    docs = render(OBS)
    dashboard = find(docs, "ConfigMap", "maasctl-grafana-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    json.loads(dashboard["data"]["maasctl-dashboard.json"])
    assert find(docs, "PrometheusRule", "maasctl")["metadata"]["namespace"] == "opendatahub"
    monitors = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceMonitor"}
    assert monitors == {"maas-controller", "maas-api"}
