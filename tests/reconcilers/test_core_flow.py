"""The core reconcilers against the real control plane: every generated object is validated by the real
third-party CRD schemas, and the assertions read what the API server stored."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch

from maasctl.builders.celcheck import check_cel
from maasctl.contract.cel import compile_expression
from maasctl.reconcilers.externalmodel import secret_keys_only
from maasctl.reconcilers.kinds import AUTH_POLICY, SECRET, TOKEN_RATE_LIMIT_POLICY
from maasctl.reconcilers.modelpolicies import compile_generated_cel
from maasctl.runtime import Client, GroupVersionKind
from maasctl.runtime.connect import connect
from maasctl.runtime.objects import freeze, thaw
from maasctl.testenv import ControlPlane
from tests.reconcilers.conftest import (
    GATEWAY_NAME,
    GATEWAY_NS,
    SUB_NS,
    Objects,
    RunningController,
    ensure_namespace,
    eventually,
    start_controller,
)


def uid() -> str:
    return uuid.uuid4().hex[:6]


def external_model(ns: str, name: str, secret: str | None = "provider-key") -> dict[str, Any]:
    spec: dict[str, Any] = {"provider": "openai", "endpoint": "https://api.provider.test/v1", "targetModel": "gpt-x"}
    if secret:
        spec["credentialRef"] = {"name": secret}
    return {"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "ExternalModel",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}


def model_ref(ns: str, name: str, kind: str, target: str) -> dict[str, Any]:
    return {"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSModelRef",
            "metadata": {"name": name, "namespace": ns}, "spec": {"modelRef": {"kind": kind, "name": target}}}


def auth_policy(name: str, models: list[tuple[str, str]], groups: list[str]) -> dict[str, Any]:
    return {"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSAuthPolicy",
            "metadata": {"name": name, "namespace": SUB_NS},
            "spec": {"modelRefs": [{"namespace": ns, "name": n} for ns, n in models],
                     "subjects": {"groups": [{"name": g} for g in groups]}}}


def subscription(name: str, models: list[tuple[str, str]], group: str, limit: int = 1000,
                 windows: tuple[str, ...] = ("1m",)) -> dict[str, Any]:
    return {"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSSubscription",
            "metadata": {"name": name, "namespace": SUB_NS},
            "spec": {"owner": {"groups": [{"name": group}]},
                     "modelRefs": [{"namespace": ns, "name": n,
                                    "tokenRateLimits": [{"limit": limit, "window": w} for w in windows]}
                                   for ns, n in models]}}


async def create_secret(kube: k8s.ApiClient, ns: str, name: str) -> None:
    await k8s.CoreV1Api(kube).create_namespaced_secret(
        ns, k8s.V1Secret(metadata=k8s.V1ObjectMeta(name=name), string_data={"api-key": "sk-upstream-secret"}))


async def publish_external(objs: Objects, kube: k8s.ApiClient, ns: str, name: str) -> None:
    await create_secret(kube, ns, "provider-key")
    await objs.create(external_model(ns, "provider"))
    await objs.create(model_ref(ns, name, "ExternalModel", "provider"))


async def test_external_model_is_published_through_a_generated_route(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    await publish_external(objs, kube, namespace, "gpt")

    async def ready() -> dict[str, Any] | None:
        mr = await objs.get("MaaSModelRef", namespace, "gpt")
        return mr if mr and (mr.get("status") or {}).get("phase") == "Ready" else None

    mr = await eventually(ready)
    assert mr["status"]["endpoint"] == f"http://maas.example.test/{namespace}/gpt/v1"
    assert "maas.opendatahub.io/finalizer" in mr["metadata"]["finalizers"]
    route_name = mr["status"]["httpRoutes"][0]["name"]
    route = await objs.get("HTTPRoute", namespace, route_name)
    assert route is not None
    assert route["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "maas-controller"
    assert route["metadata"]["ownerReferences"][0]["uid"] == mr["metadata"]["uid"]
    assert route["spec"]["parentRefs"][0] == {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                              "name": GATEWAY_NAME, "namespace": GATEWAY_NS}
    assert "sk-upstream-secret" not in str(route)

    async def em_ready() -> bool:
        em = await objs.get("ExternalModel", namespace, "provider")
        return bool(em and em.get("status", {}).get("phase") == "Ready")

    await eventually(em_ready)
    secret = await k8s.CoreV1Api(kube).read_namespaced_secret("provider-key", namespace)
    assert secret.metadata.labels["maas.opendatahub.io/upstream-key"] == "true"
    em = await objs.get("ExternalModel", namespace, "provider")
    assert em is not None and "maas.opendatahub.io/finalizer" in em["metadata"]["finalizers"]  # releases the label

    # Unpublishing removes the generated route.
    await objs.delete("MaaSModelRef", namespace, "gpt")

    async def route_gone() -> bool:
        return await objs.get("HTTPRoute", namespace, route_name) is None and \
            await objs.get("MaaSModelRef", namespace, "gpt") is None

    await eventually(route_gone)


async def test_a_key_removed_from_its_secret_fails_the_model_at_once(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    """The labelled Secret is watched: its key going away is seen from the Secret's own event, not at the next
    recheck of a failing credential (30 s)."""
    await publish_external(objs, kube, namespace, "watched")

    async def phase(want: str) -> dict[str, Any] | None:
        em = await objs.get("ExternalModel", namespace, "provider")
        return em if em and (em.get("status") or {}).get("phase") == want else None

    await eventually(lambda: phase("Ready"))
    await k8s.CoreV1Api(kube).patch_namespaced_secret(
        "provider-key", namespace, {"data": {"api-key": None, "other": "eA=="}})
    em = await eventually(lambda: phase("Failed"), timeout=20)
    ready = next(c for c in em["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "CredentialKeyMissing"
    await k8s.CoreV1Api(kube).patch_namespaced_secret("provider-key", namespace, {"data": {"api-key": "eA=="}})
    await eventually(lambda: phase("Ready"), timeout=20)


async def test_missing_credential_secret_fails_the_external_model(
    controller: RunningController, objs: Objects, namespace: str
) -> None:
    await objs.create(external_model(namespace, "nokey", secret="absent"))

    async def failed() -> dict[str, Any] | None:
        em = await objs.get("ExternalModel", namespace, "nokey")
        return em if em and em.get("status", {}).get("phase") == "Failed" else None

    em = await eventually(failed)
    ready = next(c for c in em["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "CredentialNotFound"


async def test_an_external_model_without_credentials_gets_no_finalizer(
    controller: RunningController, objs: Objects, namespace: str
) -> None:
    await objs.create(external_model(namespace, "open", secret=None))

    async def ready() -> dict[str, Any] | None:
        em = await objs.get("ExternalModel", namespace, "open")
        return em if em and em.get("status", {}).get("phase") == "Ready" else None

    em = await eventually(ready)
    assert "maas.opendatahub.io/finalizer" not in (em["metadata"].get("finalizers") or [])  # nothing to release
    await objs.delete("ExternalModel", namespace, "open")
    assert await eventually(lambda: _gone(objs, namespace, "open"))


async def _gone(objs: Objects, namespace: str, name: str) -> bool:
    return await objs.get("ExternalModel", namespace, name) is None


async def test_auth_policies_and_subscriptions_aggregate_per_model(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    await publish_external(objs, kube, namespace, "m1")
    ap1, ap2, s1, s2 = (f"{p}-{uid()}" for p in ("ap1", "ap2", "s1", "s2"))
    await objs.create(auth_policy(ap1, [(namespace, "m1")], ["premium-users"]))
    await objs.create(auth_policy(ap2, [(namespace, "m1")], ["free-users"]))
    await objs.create(subscription(s1, [(namespace, "m1")], "premium-users", 5000, ("1m", "24h")))
    await objs.create(subscription(s2, [(namespace, "m1")], "free-users", 100))

    async def trlp_has(keys: set[str]) -> dict[str, Any] | None:
        trlp = await objs.get("TokenRateLimitPolicy", namespace, "maas-trlp-m1")
        if trlp and set(trlp["spec"]["limits"]) == keys:
            return trlp
        return None

    trlp = await eventually(lambda: trlp_has({f"{SUB_NS}-{s1}-m1-tokens", f"{SUB_NS}-{s2}-m1-tokens"}))
    premium = trlp["spec"]["limits"][f"{SUB_NS}-{s1}-m1-tokens"]
    assert [(r["limit"], r["window"]) for r in premium["rates"]] == [(5000, "1m"), (5000, "24h")]
    assert premium["counters"] == [{"expression": "auth.identity.userid"}]
    assert trlp["spec"]["targetRef"]["kind"] == "HTTPRoute"

    async def ap_has(groups: set[str]) -> dict[str, Any] | None:
        ap = await objs.get("AuthPolicy", namespace, "maas-auth-m1")
        if ap is None:
            return None
        rule = ap["spec"]["rules"]["authorization"]["allowed-subjects"]["patternMatching"]["patterns"][0]
        named = {g for g in ("premium-users", "free-users") if f'"{g}"' in rule["predicate"]}
        return ap if named == groups else None

    await eventually(lambda: ap_has({"premium-users", "free-users"}))

    def selection_cache_key(ap: dict[str, Any]) -> str:
        return str(ap["spec"]["rules"]["metadata"]["subscriptionInfo"]["cache"]["key"]["expression"])

    async def active(kind: str, name: str) -> bool:
        obj = await objs.get(kind, SUB_NS, name)
        return bool(obj and obj.get("status", {}).get("phase") == "Active")

    await eventually(lambda: active("MaaSSubscription", s1))
    await eventually(lambda: active("MaaSAuthPolicy", ap1))

    # Deleting one subscription rebuilds the model's policy for the other; deleting both removes it.
    before = selection_cache_key(await eventually(lambda: ap_has({"premium-users", "free-users"})))
    await objs.delete("MaaSSubscription", SUB_NS, s2)
    await eventually(lambda: trlp_has({f"{SUB_NS}-{s1}-m1-tokens"}))

    async def selection_rekeyed() -> bool:  # no selection cached while s2 existed is reused
        ap = await objs.get("AuthPolicy", namespace, "maas-auth-m1")
        return ap is not None and selection_cache_key(ap) != before

    await eventually(selection_rekeyed)
    await objs.delete("MaaSAuthPolicy", SUB_NS, ap2)
    await eventually(lambda: ap_has({"premium-users"}))
    await objs.delete("MaaSSubscription", SUB_NS, s1)

    async def trlp_gone() -> bool:
        return await objs.get("TokenRateLimitPolicy", namespace, "maas-trlp-m1") is None

    await eventually(trlp_gone)
    await objs.delete("MaaSAuthPolicy", SUB_NS, ap1)


async def test_drift_is_reverted_and_opted_out_objects_are_left_alone(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    await publish_external(objs, kube, namespace, "m2")
    sub = f"s-{uid()}"
    await objs.create(subscription(sub, [(namespace, "m2")], "free-users", 100))
    key = f"{SUB_NS}-{sub}-m2-tokens"

    async def limit_is(value: int) -> bool:
        trlp = await objs.get("TokenRateLimitPolicy", namespace, "maas-trlp-m2")
        return bool(trlp and trlp["spec"]["limits"][key]["rates"][0]["limit"] == value)

    await eventually(lambda: limit_is(100))
    trlp = await objs.get("TokenRateLimitPolicy", namespace, "maas-trlp-m2")
    assert trlp is not None
    rates = trlp["spec"]["limits"][key]["rates"]
    await objs.patch("TokenRateLimitPolicy", namespace, "maas-trlp-m2",
                     {"spec": {"limits": {key: {"rates": [{**rates[0], "limit": 999999}]}}}})
    await eventually(lambda: limit_is(100))

    await objs.patch("TokenRateLimitPolicy", namespace, "maas-trlp-m2",
                     {"metadata": {"annotations": {"opendatahub.io/managed": "false"}}})
    await objs.patch("MaaSSubscription", SUB_NS, sub, {"spec": {"modelRefs": [
        {"namespace": namespace, "name": "m2", "tokenRateLimits": [{"limit": 200, "window": "1m"}]}]}})

    async def subscription_reconciled() -> bool:
        obj = await objs.get("MaaSSubscription", SUB_NS, sub)
        return bool(obj and obj.get("status", {}).get("observedGeneration") == obj["metadata"]["generation"])

    await eventually(subscription_reconciled)
    assert await limit_is(100)
    await objs.delete("MaaSSubscription", SUB_NS, sub)


async def test_model_published_after_its_subscription_is_picked_up(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    sub = f"early-{uid()}"
    await objs.create(subscription(sub, [(namespace, "late")], "free-users", 100))

    async def failed_not_found() -> bool:
        obj = await objs.get("MaaSSubscription", SUB_NS, sub)
        status = (obj or {}).get("status") or {}
        return status.get("phase") == "Failed" and status["modelRefStatuses"][0]["reason"] == "NotFound"

    await eventually(failed_not_found)
    await publish_external(objs, kube, namespace, "late")

    async def trlp_created() -> bool:
        return await objs.get("TokenRateLimitPolicy", namespace, "maas-trlp-late") is not None

    await eventually(trlp_created)
    await objs.delete("MaaSSubscription", SUB_NS, sub)


async def test_restart_after_convergence_writes_nothing(
    fresh_maas_cluster: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a cluster of its own: leftovers of other tests (e.g. terminating namespaces) would be real work. The
    restarted controller also reads no Secret live: the provider key's Secret, labelled by the first, comes from
    the cache, which holds the names of its data's keys and none of the values."""
    kube = await connect(str(fresh_maas_cluster.kubeconfig))
    objs = Objects(kube)
    namespace = "steady-models"
    await ensure_namespace(k8s.CoreV1Api(kube), namespace)
    first = await start_controller(fresh_maas_cluster)
    sub, pol = f"r-{uid()}", f"rp-{uid()}"
    try:
        await publish_external(objs, kube, namespace, "steady")
        await objs.create(subscription(sub, [(namespace, "steady")], "free-users", 100))
        await objs.create(auth_policy(pol, [(namespace, "steady")], ["free-users"]))

        async def converged() -> bool:
            s = await objs.get("MaaSSubscription", SUB_NS, sub)
            p = await objs.get("MaaSAuthPolicy", SUB_NS, pol)
            m = await objs.get("MaaSModelRef", namespace, "steady")
            return all((o or {}).get("status", {}).get("phase") in ("Active", "Ready") for o in (s, p, m))

        await eventually(converged)
        # Converged means idle too: no write for 3 s (status updates may trail the phases checked above).
        quiet_since, writes = asyncio.get_running_loop().time(), first.manager.applier.writes
        while asyncio.get_running_loop().time() - quiet_since < 3:
            await asyncio.sleep(0.2)
            if first.manager.applier.writes != writes:
                quiet_since, writes = asyncio.get_running_loop().time(), first.manager.applier.writes
    finally:
        await first.stop()

    async def versions() -> dict[str, str]:
        out = {}
        for kind, ns, name in (("MaaSSubscription", SUB_NS, sub), ("MaaSAuthPolicy", SUB_NS, pol),
                               ("MaaSModelRef", namespace, "steady"), ("ExternalModel", namespace, "provider"),
                               ("TokenRateLimitPolicy", namespace, "maas-trlp-steady"),
                               ("AuthPolicy", namespace, "maas-auth-steady"),
                               ("HTTPRoute", namespace, "maas-steady")):
            obj = await objs.get(kind, ns, name)
            assert obj is not None, (kind, name)
            out[kind] = obj["metadata"]["resourceVersion"]
        return out

    before = await versions()
    secret_reads: list[str] = []
    live_get = Client.get

    async def counting_get(self: Client, gvk: GroupVersionKind, name: str, namespace: str | None = None) -> Any:
        if gvk == SECRET:
            secret_reads.append(f"{namespace}/{name}")
        return await live_get(self, gvk, name, namespace)

    monkeypatch.setattr(Client, "get", counting_get)
    second = await start_controller(fresh_maas_cluster)
    try:
        await asyncio.sleep(1)
        assert await second.manager.cache.wait_for_sync(deadline=30)
        await asyncio.sleep(3)  # let every initial-list reconcile run
        assert second.manager.applier.writes == 0
        assert await versions() == before
        assert secret_reads == []
        cached = second.manager.cache.get(SECRET, "provider-key", namespace)
        assert cached is not None and dict(cached["data"]) == {"api-key": ""}
        assert "sk-upstream-secret" not in str(cached)
    finally:
        await second.stop()
        await kube.close()

    # A standby's warm-up compiles the CEL of the generated policies it holds: a render after a takeover,
    # checking the same texts, compiles nothing more.
    generated = [o for gvk in (AUTH_POLICY, TOKEN_RATE_LIMIT_POLICY) for o in second.manager.cache.list(gvk)
                 if o["metadata"]["namespace"] == namespace]
    assert len(generated) == 2
    compile_expression.cache_clear()
    await compile_generated_cel(second.manager.cache)()
    compiled = compile_expression.cache_info().misses
    assert compiled > 0
    for policy in generated:
        check_cel(thaw(policy))
    assert compile_expression.cache_info().misses == compiled


async def _ready_reasons(kube: k8s.ApiClient, namespace: str, name: str, seen: list[str]) -> None:
    """Record the Ready reason of every version of a MaaSModelRef's status (from a watch)."""
    w = watch.Watch()
    async with w:
        async for event in w.stream(k8s.CustomObjectsApi(kube).list_namespaced_custom_object,
                                    "maas.opendatahub.io", "v1alpha1", namespace, "maasmodelrefs",
                                    field_selector=f"metadata.name={name}", timeout_seconds=120):
            conditions = (event["object"].get("status") or {}).get("conditions") or []
            seen.extend(c["reason"] for c in conditions if c["type"] == "Ready")


async def test_publishing_writes_no_status_while_the_cache_lags_the_generated_route(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    seen: list[str] = []
    recorder = asyncio.create_task(_ready_reasons(kube, namespace, "lag", seen))
    try:
        await publish_external(objs, kube, namespace, "lag")
        await eventually(lambda: _async("Ready" in seen))
        assert "RouteNotFound" not in seen  # the route it just applied is not "not generated yet"
    finally:
        recorder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await recorder


async def _async(value: bool) -> bool:
    return value


def test_secret_keys_only_keeps_the_key_names_and_drops_every_value() -> None:
    obj = {"metadata": {"name": "s"}, "type": "Opaque", "data": {"api-key": "c2stb2FpLXNlY3JldA==", "b": "eA=="},
           "stringData": {"c": "plain"}}
    out = secret_keys_only(obj)
    assert out == {"metadata": {"name": "s"}, "type": "Opaque", "data": {"api-key": "", "b": ""}}
    assert secret_keys_only({"metadata": {"name": "empty"}}) == {"metadata": {"name": "empty"}}
    # the informers hand it the object as decoded, read-only: the values go all the same
    assert secret_keys_only(freeze(obj)) == out
