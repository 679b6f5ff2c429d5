"""The Guardrails pages' pure parts (no cluster, no browser): the configuration a form writes (each type once,
fields it does not show kept, the key only as a Secret reference), the Secrets it leaves behind, attachments,
and the subscription form's per-model choice."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from maasctl.console import guardrails as gr
from maasctl.console.subscriptions import FormError, ModelRow, SubscriptionForm, desired, error_field

URL = "https://guard.example.com/v1"


def _form(*rows: gr.ModelRow, config_id: str = "safety") -> gr.ConfigForm:
    return gr.ConfigForm(config_id=config_id, config_yaml="rails: {}\n", models=list(rows))


def test_each_model_type_at_most_once() -> None:
    form = _form(gr.ModelRow("main", "a", URL), gr.ModelRow(), gr.ModelRow("main", "b", URL))
    with pytest.raises(FormError) as err:
        gr.desired(form, "ns", None)
    assert err.value.field == "models-2-type"


def test_a_new_key_is_only_a_reference_and_blank_rows_are_skipped() -> None:
    form = _form(gr.ModelRow(), gr.ModelRow("content_safety", "g", URL, new_key=True))
    obj, included = gr.desired(form, "ns", None)
    assert included == [1]
    assert obj["spec"]["models"] == [{"type": "content_safety", "model": "g", "baseUrl": URL, "apiKeySecretRef": {
        "name": "maas-guardrail-safety-content-safety", "key": "api-key"}}]
    assert "railsCo" not in obj["spec"]
    gr.validate(obj)


def test_an_edit_keeps_what_the_form_does_not_show() -> None:
    base: dict[str, Any] = {
        "apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "GuardrailConfig",
        "metadata": {"name": "safety", "namespace": "ns", "resourceVersion": "5", "labels": {"team": "x"}},
        "spec": {"models": [{"type": "main", "engine": "nim", "model": "a", "baseUrl": URL,
                             "apiKeySecretRef": {"name": "kubectl-made", "key": "token"}}],
                 "configYaml": "old", "railsCo": "define flow x\n", "futureField": 1},
        "status": {"phase": "Ready"}}
    form = gr.form_from(base)
    form.models[0].type = "main_renamed"  # its entry keeps engine and key reference
    form.config_yaml = "new"
    obj, _ = gr.desired(form, "ns", base)
    assert obj["spec"] == {"models": [{"type": "main_renamed", "engine": "nim", "model": "a", "baseUrl": URL,
                                       "apiKeySecretRef": {"name": "kubectl-made", "key": "token"}}],
                           "configYaml": "new", "railsCo": "define flow x\n", "futureField": 1}
    assert obj["metadata"]["resourceVersion"] == "5" and obj["metadata"]["labels"] == {"team": "x"}
    assert "status" not in obj
    form.models[0].remove_key = True
    obj, _ = gr.desired(form, "ns", base)
    assert "apiKeySecretRef" not in obj["spec"]["models"][0]
    assert gr.stale_secrets("safety", base, obj) == []  # a Secret the console did not make is never deleted


def test_stale_console_secrets() -> None:
    def cfg(*names: str) -> dict[str, Any]:
        return {"spec": {"models": [{"type": "t", "apiKeySecretRef": {"name": n}} for n in names]}}
    before = cfg("maas-guardrail-safety-main", "maas-guardrail-safety-judge", "other")
    assert gr.stale_secrets("safety", before, cfg("maas-guardrail-safety-main")) == ["maas-guardrail-safety-judge"]
    assert gr.stale_secrets("safety", None, cfg("maas-guardrail-safety-main")) == []


def test_api_types_errors_land_on_the_row() -> None:
    form = _form(gr.ModelRow(), gr.ModelRow("main", "a", "ftp://x"))
    obj, included = gr.desired(form, "ns", None)
    with pytest.raises(ValidationError) as err:
        gr.validate(obj)
    assert {gr.error_field(tuple(e["loc"]), included) for e in err.value.errors()} == {"models-1-base_url"}
    assert gr.api_fields(included)["spec.models[0].baseUrl"] == "models-1-base_url"


def test_attachments_and_rows() -> None:
    subs = [{"metadata": {"name": "gold"}, "spec": {"modelRefs": [
        {"name": "a", "namespace": "llm", "guardrails": {"enabled": True, "config": "safety"}},
        {"name": "b", "namespace": "llm", "guardrails": {"enabled": False, "config": "safety"}},
        {"name": "c", "namespace": "llm"}]}}]
    attached = gr.attachments(subs)
    assert attached == {"safety": [{"subscription": "gold", "model": "llm/a"}]}
    row = gr.config_row({"metadata": {"name": "safety", "generation": 2}, "spec": {"models": []},
                         "status": {"phase": "Invalid", "observedGeneration": 1,
                                    "conditions": [{"type": "Valid", "status": "False", "message": "old"}]}},
                        attached)
    assert row["phase"] == "Pending" and row["problem"] == ""  # a verdict on an older version is not shown
    assert row["attached"] == attached["safety"]


def test_settings_spec() -> None:
    assert gr.settings_spec(True, "FailOpen") == {"enabled": True, "failurePolicy": "FailOpen"}
    with pytest.raises(FormError):
        gr.settings_spec(True, "Sometimes")
    assert gr.settings_view(None)["enabled"] is False


def _sub(guardrails: dict[str, Any] | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": "m", "namespace": "llm", "unlimited": True}
    if guardrails is not None:
        entry["guardrails"] = guardrails
    return {"metadata": {"name": "s", "namespace": "maas"}, "spec": {"owner": {"users": ["*"]},
                                                                   "modelRefs": [entry]}}


@pytest.mark.parametrize(("before", "choice", "after"), [
    (None, "safety", {"enabled": True, "config": "safety"}),
    ({"enabled": True, "config": "old"}, "safety", {"enabled": True, "config": "safety"}),
    ({"enabled": True, "config": "old"}, "", None),  # none: no longer checked
    ({"enabled": False, "config": "old"}, "", {"enabled": False, "config": "old"}),  # kept as it was
    (None, "", None),
])
def test_subscription_per_model_guardrails(before: dict[str, Any] | None, choice: str,
                                           after: dict[str, Any] | None) -> None:
    row = ModelRow("llm", "m", include=True, unlimited=True, guardrails=choice)
    form = SubscriptionForm(name="s", users="*", models=[row])
    obj, _ = desired(form, "maas", _sub(before), {row.ref: None})
    assert obj["spec"]["modelRefs"][0].get("guardrails") == after
    assert error_field(("spec", "modelRefs", 0, "guardrails", "config"), [0]) == "model-0-guardrails"
