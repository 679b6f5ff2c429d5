"""The Envoy Gateway `EnvoyExtensionPolicy` that puts the payload processor into a managed Gateway's chain.

The same two stages as the Istio EnvoyFilter (`builders.envoyfilter`), as two `extProc` entries run in order
on every route of the Gateway, both calling the processor Service:

- Envoy Gateway's extProc API has no gRPC initial metadata, so the processor tells the stages apart by the
  processing mode Envoy announces (`contract.processor_stages`): `pre` asks for no response at all, `post`
  for the streamed response body;
- Envoy Gateway places all ext_proc filters at one point of its filter order, so both stages run on the
  same side of Kuadrant's wasm filter (see docs/data-plane.md, "Envoy filter chain", for the EnvoyProxy
  `filterOrder` this needs and what it leaves out);
- there are no trailer modes and no per-route disable in this API: maas-api's routes reach the processor,
  which passes requests of routes it does not serve through unchanged.

A Service in another namespace than the policy needs a ReferenceGrant there (manifests/base/payload-processor).
"""

from __future__ import annotations

from typing import Any, Final

from maasctl.builders.payloadwiring import ALLOW_MODE_OVERRIDE, MESSAGE_TIMEOUT, ProcessorWiring, wiring_metadata
from maasctl.contract.processor_stages import MODES, STAGE_POST, STAGES, FilterModes, Stage

__all__ = ["EXTENSION_POLICY_API_VERSION", "METADATA_NAMESPACE", "build_extension_policy"]

EXTENSION_POLICY_API_VERSION: Final = "gateway.envoyproxy.io/v1alpha1"
METADATA_NAMESPACE: Final = "maas.opendatahub.io"
"""The dynamic-metadata namespace the post stage may write (model, usage: for access logs)."""

def _processing_mode(modes: FilterModes) -> dict[str, Any]:
    """Envoy Gateway's `processingMode`: a `request` / `response` entry asks for that direction's headers, its
    `body` for the body (Envoy Gateway's spelling of the same modes; trailers it does not expose)."""
    out: dict[str, Any] = {"request": {"body": modes.request_body.title()}}
    if modes.response_headers:
        out["response"] = {"body": modes.response_body.title()} if modes.response_body != "NONE" else {}
    return out


_MODES: Final[dict[Stage, dict[str, Any]]] = {stage: _processing_mode(m) for stage, m in MODES.items()}


def _ext_proc(wiring: ProcessorWiring, stage: Stage) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "backendRefs": [{"group": "", "kind": "Service", "name": wiring.processor.name,
                         "namespace": wiring.processor.namespace, "port": wiring.port}],
        "failOpen": wiring.fail_open,
        "messageTimeout": MESSAGE_TIMEOUT,
        "processingMode": {"allowModeOverride": ALLOW_MODE_OVERRIDE[stage], **_MODES[stage]},
    }
    if stage == STAGE_POST:
        entry["metadata"] = {"writableNamespaces": [METADATA_NAMESPACE]}
    return entry


def build_extension_policy(wiring: ProcessorWiring) -> dict[str, Any]:
    """The EnvoyExtensionPolicy of `wiring.gateway` (raises InvalidInputError on names Kubernetes would refuse)."""
    wiring.check()
    return {
        "apiVersion": EXTENSION_POLICY_API_VERSION,
        "kind": "EnvoyExtensionPolicy",
        "metadata": wiring_metadata(wiring),
        "spec": {
            "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": wiring.gateway.name}],
            "extProc": [_ext_proc(wiring, stage) for stage in STAGES],
        },
    }
