"""A managed Gateway -> its payload-processor wiring, and the Gateway's `PayloadProcessorWired` condition.

Which wiring is decided by what the cluster serves (the informers say whether each CRD is installed): the
Istio `EnvoyFilter` when `networking.istio.io/v1alpha3` is served (OpenShift / Istio ingress), else the Envoy
Gateway `EnvoyExtensionPolicy`; the other kind, if we wrote it before, is deleted. With neither, or with the
wiring turned off (`--no-payload-processor-wiring`), the condition says so and nothing is written. The wiring is
owned by the Gateway (ownerReference), so garbage collection removes it with the Gateway.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from maasctl.builders.envoyfilter import build_envoy_filter
from maasctl.builders.extensionpolicy import build_extension_policy
from maasctl.builders.payloadwiring import ProcessorWiring, wiring_name
from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.builders.validation import InvalidInputError
from maasctl.reconcilers.context import Context, status_patch
from maasctl.reconcilers.kinds import ENVOY_EXTENSION_POLICY, ENVOY_FILTER, HTTP_ROUTE
from maasctl.runtime import find_condition
from maasctl.runtime.conditions import now_rfc3339

__all__ = [
    "CONDITION",
    "REASON_DISABLED",
    "REASON_ENVOY_GATEWAY",
    "REASON_ISTIO",
    "REASON_NONE",
    "processor_owns_credentials",
    "wire_gateway",
]

CONDITION: Final = "PayloadProcessorWired"
REASON_ISTIO: Final = "IstioEnvoyFilter"
REASON_ENVOY_GATEWAY: Final = "EnvoyGatewayExtensionPolicy"
REASON_NONE: Final = "NoSupportedProxyAPI"
REASON_DISABLED: Final = "Disabled"
REASON_RENDER: Final = "RenderFailed"


def _wiring(ctx: Context, gateway: Mapping[str, Any]) -> ProcessorWiring:
    s = ctx.settings
    meta = gateway["metadata"]
    bypass = []
    for key in s.payload_processor_bypass_routes:
        ns, _, name = key.partition("/")
        route = ctx.cache.get(HTTP_ROUTE, name, ns)
        rules = len(((route or {}).get("spec") or {}).get("rules") or ())
        if rules:
            bypass.append((ObjectRef(ns, name), rules))
    ns, _, name = s.payload_processor_service.partition("/")
    return ProcessorWiring(gateway=GatewayRef(meta["namespace"], meta["name"]), gateway_uid=str(meta.get("uid", "")),
                           processor=ObjectRef(ns, name), port=s.payload_processor_port,
                           fail_open=s.payload_processor_fail_open, bypass_routes=tuple(bypass))


async def _set_condition(ctx: Context, gateway: Mapping[str, Any], status: str, reason: str, message: str) -> None:
    """Apply only our condition (the Gateway's controller owns the others: server-side apply merges by type).
    Compared here, not by the applier: its no-op check compares lists whole, and the list holds the others."""
    live = find_condition((gateway.get("status") or {}).get("conditions"), CONDITION)
    since = live.get("lastTransitionTime") if live is not None and live.get("status") == status else None
    condition = {"type": CONDITION, "status": status, "reason": reason, "message": message[:32768],
                 "lastTransitionTime": since or now_rfc3339(),
                 "observedGeneration": int(gateway["metadata"].get("generation") or 0)}
    if live is not None and all(live.get(k) == v for k, v in condition.items()):
        return
    await ctx.applier.apply_status(status_patch(gateway, {"conditions": [condition]}))


async def wire_gateway(ctx: Context, gateway: Mapping[str, Any]) -> bool:
    """Apply the wiring the cluster supports and write the condition. False when the caller should look again
    later: no proxy API is served yet, or only Envoy Gateway's (Istio's, preferred, may still appear; a CRD
    appearing produces no watch event)."""
    ref = GatewayRef(gateway["metadata"]["namespace"], gateway["metadata"]["name"])
    name = wiring_name(ref)
    istio = not ctx.missing_apis(ENVOY_FILTER)
    envoy_gateway = not ctx.missing_apis(ENVOY_EXTENSION_POLICY)
    chosen = (ENVOY_FILTER if istio else ENVOY_EXTENSION_POLICY if envoy_gateway else None)
    if not ctx.settings.payload_processor_wiring:
        chosen = None
    for gvk in (ENVOY_FILTER, ENVOY_EXTENSION_POLICY):
        if gvk != chosen:
            await ctx.delete_generated(gateway, gvk, name, ref.namespace)
    if not ctx.settings.payload_processor_wiring:
        await _set_condition(ctx, gateway, "False", REASON_DISABLED,
                             "payload processor wiring is turned off (--no-payload-processor-wiring): requests "
                             "are not metered, no provider key is injected and no guardrail runs")
        return True
    if chosen is None:
        await _set_condition(ctx, gateway, "False", REASON_NONE,
                             "neither Istio's EnvoyFilter (networking.istio.io/v1alpha3) nor Envoy Gateway's "
                             "EnvoyExtensionPolicy (gateway.envoyproxy.io/v1alpha1) is served: the payload "
                             "processor is not in this Gateway's filter chain")
        return False
    try:
        wiring = _wiring(ctx, gateway)
        desired = build_envoy_filter(wiring) if chosen == ENVOY_FILTER else build_extension_policy(wiring)
    except InvalidInputError as exc:
        await ctx.event(gateway, "Warning", REASON_RENDER, f"payload processor wiring: {exc}")
        await _set_condition(ctx, gateway, "False", REASON_RENDER, str(exc))
        return True
    await ctx.apply_generated(gateway, desired)
    reason = REASON_ISTIO if chosen == ENVOY_FILTER else REASON_ENVOY_GATEWAY
    await _set_condition(ctx, gateway, "True", reason,
                         f"{chosen.kind} {ref.namespace}/{name} calls {wiring.processor.key}:{wiring.port}")
    return chosen == ENVOY_FILTER


def processor_owns_credentials(gateway: Mapping[str, Any] | None, fail_open: bool) -> bool:
    """Whether the ExternalModel routes of `gateway` must leave `authorization` to the processor.

    Envoy applies a route's RequestHeaderModifier in the router, after ext_proc, so a route removing
    `authorization` would also remove the provider key the processor's post stage injected. The processor
    removes the caller's credentials itself, so the route may keep `authorization` only when the processor is
    certainly in the path: the Gateway is wired (condition True) and fails closed (with `failure_mode_allow` an
    unreachable processor would forward the caller's own credential to the provider). Otherwise the route keeps
    removing it, and an ExternalModel with a provider key cannot be served on that Gateway.
    """
    if gateway is None or fail_open:
        return False
    cond = find_condition((gateway.get("status") or {}).get("conditions"), CONDITION)
    generation = int(gateway["metadata"].get("generation") or 0)
    return cond is not None and cond.get("status") == "True" and int(cond.get("observedGeneration") or 0) == generation
