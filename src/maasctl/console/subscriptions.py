"""Pure functions between the subscription form and the MaaSSubscription + its matching MaaSAuthPolicy.

Subscribers only reach a model when an auth policy admits them too (the gateway is closed by default), so
every subscription saved in the console has a MaaSAuthPolicy of the same name, labelled as the console's,
with the same models and subjects. Policies the console did not create are never changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from maasctl.api import (
    DESCRIPTION_ANNOTATION,
    DISPLAY_NAME_ANNOTATION,
    MaaSAuthPolicy,
    MaaSSubscription,
    dump,
)

MANAGED_LABEL = "maas.opendatahub.io/console-subscription"


@dataclass
class ModelRow:
    """One published model in the form: included or not, its tiers as typed."""

    namespace: str
    name: str
    kind: str = ""
    include: bool = False
    tiers: str = ""
    billing_rate: dict[str, Any] | None = None  # kept as it was (not edited here)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class SubscriptionForm:
    name: str = ""
    display_name: str = ""
    description: str = ""
    users: str = ""
    groups: str = ""
    priority: str = "0"
    resource_version: str = ""
    models: list[ModelRow] = field(default_factory=list)


def split_list(text: str) -> list[str]:
    return list(dict.fromkeys(x.strip() for x in text.replace("\n", ",").split(",") if x.strip()))


def subscription(form: SubscriptionForm, namespace: str, limits: dict[str, list[dict[str, Any]] | None]
                 ) -> MaaSSubscription:
    """The MaaSSubscription for the form; `limits` maps each included model ref to its tiers (None:
    unlimited). Raises pydantic.ValidationError with the API types' own messages."""
    owner: dict[str, Any] = {}
    if users := split_list(form.users):
        owner["users"] = users
    if groups := split_list(form.groups):
        owner["groups"] = [{"name": g} for g in groups]
    refs = []
    for row in form.models:
        if not row.include:
            continue
        ref: dict[str, Any] = {"name": row.name, "namespace": row.namespace}
        tiers = limits.get(row.ref)
        if tiers is None:
            ref["unlimited"] = True
        else:
            ref["tokenRateLimits"] = tiers
        if row.billing_rate:
            ref["billingRate"] = row.billing_rate
        refs.append(ref)
    notes = {k: v for k, v in ((DISPLAY_NAME_ANNOTATION, form.display_name.strip()),
                               (DESCRIPTION_ANNOTATION, form.description.strip())) if v}
    meta: dict[str, Any] = {"name": form.name, "namespace": namespace}
    if notes:
        meta["annotations"] = notes
    priority: Any = form.priority.strip() or "0"
    return MaaSSubscription.model_validate({"metadata": meta, "spec": {
        "owner": owner, "modelRefs": refs, "priority": priority}})


def auth_policy(sub: MaaSSubscription) -> MaaSAuthPolicy:
    """The auth policy admitting the subscription's subscribers to its models."""
    owner = sub.spec.owner
    subjects: dict[str, Any] = {}
    if owner.users:
        subjects["users"] = list(owner.users)
    if owner.groups:
        subjects["groups"] = [{"name": g.name} for g in owner.groups]
    return MaaSAuthPolicy.model_validate({
        "metadata": {"name": sub.metadata.name, "namespace": sub.metadata.namespace,
                     "labels": {MANAGED_LABEL: str(sub.metadata.name)}},
        "spec": {"modelRefs": [{"name": r.name, "namespace": r.namespace} for r in sub.spec.model_refs],
                 "subjects": subjects},
    })


def subscription_patch(sub: MaaSSubscription, resource_version: str) -> dict[str, Any]:
    """A merge patch replacing what the form edits (and nothing else); removed fields are set to null.
    The resourceVersion makes a concurrent change a conflict instead of a silent overwrite."""
    body = dump(sub)
    owner = body["spec"]["owner"]
    notes = body["metadata"].get("annotations") or {}
    meta: dict[str, Any] = {"annotations": {DISPLAY_NAME_ANNOTATION: notes.get(DISPLAY_NAME_ANNOTATION),
                                            DESCRIPTION_ANNOTATION: notes.get(DESCRIPTION_ANNOTATION)}}
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {"metadata": meta, "spec": {
        "owner": {"users": owner.get("users"), "groups": owner.get("groups")},
        "modelRefs": body["spec"]["modelRefs"], "priority": body["spec"].get("priority", 0)}}


def error_field(loc: tuple[str | int, ...], included: list[int]) -> str:
    """The form field of a pydantic error location; `included[i]` is the form row of spec.modelRefs[i]."""
    if loc[:2] == ("spec", "owner"):
        return "subscribers"
    if loc[:2] == ("spec", "priority"):
        return "priority"
    if loc[:2] == ("spec", "modelRefs"):
        if len(loc) > 2 and isinstance(loc[2], int) and loc[2] < len(included):
            return f"model-{included[loc[2]]}-tiers"
        return "models"
    if loc and loc[0] == "metadata":
        return "display_name" if "annotations" in loc else "name"
    return "_form"


def api_fields(included: list[int]) -> dict[str, str]:
    """API server field paths -> form fields (for `forms.kube_errors`)."""
    out = {"metadata.name": "name", "metadata.annotations": "display_name", "spec.owner": "subscribers",
           "spec.priority": "priority", "spec.modelRefs": "models", "metadata.resourceVersion": "_form"}
    for i, row in enumerate(included):
        out[f"spec.modelRefs[{i}]"] = f"model-{row}-tiers"
    return out
