"""Plan reconciler: compile the Plan (pure), apply what it compiles to, report every outcome as a condition.

Per reconcile: read the Plan, its tenants and its target from the cache; `compile_plan`; check every CEL text;
for each desired object refuse to touch a same-named object that is not ours (AdoptionConflict), notice and
revert external edits (Drifted), apply (a no-op when nothing changed); delete objects the Plan no longer wants;
write status (`compiledPolicies` with `upToDate`, six conditions) and record an Event for each transition.
Kuadrant or Kueue missing is a condition, and the Plan is looked at again until their CRDs appear.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from maasctl.api import parse
from maasctl.billing.api import Plan
from maasctl.billing.api.kinds import (
    BUDGET_POLICY,
    CLUSTER_QUEUE,
    GATEWAY,
    HTTP_ROUTE,
    KUADRANT_KINDS,
    KUEUE_KINDS,
    PLAN,
    RESOURCE_FLAVOR,
    TENANT_ACCOUNT,
)
from maasctl.billing.api.tenant import TenantState
from maasctl.billing.controller.reconcilers.budget import fired_condition
from maasctl.billing.controller.reconcilers.context import BillingContext, log
from maasctl.billing.rules import budget, drift, identity, names, wallet
from maasctl.billing.rules.compile import BudgetAction, PlanInput, Tenant, compile_plan, resource_flavor
from maasctl.builders import authpolicy as maas_auth
from maasctl.builders.celcheck import check_cel
from maasctl.contract.cel import CelError
from maasctl.runtime import GroupVersionKind, Invalid, NotFound, Request, Result, set_condition, thaw
from maasctl.runtime.informer import Event, EventType
from maasctl.runtime.objects import FrozenObject

COMPILED, DRIFTED, ADOPTION_CONFLICT = "Compiled", "Drifted", "AdoptionConflict"
KUADRANT_NOT_INSTALLED, GATEWAY_NOT_FOUND, UNSUPPORTED_FIELD = "KuadrantNotInstalled", "GatewayNotFound", \
    "UnsupportedField"
GENERATED_KINDS = (*KUADRANT_KINDS, CLUSTER_QUEUE)
ENFORCED_STATES = frozenset(str(s) for s in wallet.ENFORCED)


@dataclass(frozen=True)
class Outcome:
    """What happened to one desired object."""

    obj: Mapping[str, Any]
    up_to_date: bool
    conflict: str | None = None
    drift: tuple[str, ...] = ()
    revert_failed: bool = False
    error: str | None = None

    def ref(self) -> dict[str, Any]:
        meta = self.obj["metadata"]
        out: dict[str, Any] = {"group": GroupVersionKind.of(self.obj).group, "kind": self.obj["kind"],
                               "name": meta["name"], "upToDate": self.up_to_date}
        if meta.get("namespace"):
            out["namespace"] = meta["namespace"]
        return out

    @property
    def label(self) -> str:
        meta = self.obj["metadata"]
        where = f"{meta['namespace']}/" if meta.get("namespace") else ""
        return f"{self.obj['kind']} {where}{meta['name']}"


def is_ours(live: Mapping[str, Any], namespace: str, plan: str) -> bool:
    """A generated object of this Plan: our managed-by label and the Plan's labels."""
    want = names.plan_labels(namespace, plan)
    labels = (live.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in want.items())


def plans_of_tenant(obj: FrozenObject) -> list[Request]:
    """A TenantAccount change concerns the Plan it names (for updates, also the one it named before)."""
    ref = ((obj.get("spec") or {}).get("planRef") or {}).get("name")
    return [Request(obj["metadata"].get("namespace"), str(ref))] if ref else []


def wallet_state_changed(event: Event) -> bool:
    """A TenantAccount entered or left an enforced wallet state (or appeared/went away in one)."""
    if event.type is not EventType.UPDATED or event.old is None:
        return True
    before = (event.old.get("status") or {}).get("state") in ENFORCED_STATES
    return before != ((event.obj.get("status") or {}).get("state") in ENFORCED_STATES)


def allowance_of(obj: FrozenObject) -> tuple[tuple[str, int], ...]:
    """The (epoch, tokens) caps a Prepaid tenant's limits use (`status.allowanceLimits`, read failing closed by
    `wallet.caps_in_force`; empty: no limit)."""
    if (obj.get("spec") or {}).get("billingMode") != "Prepaid":
        return ()
    return wallet.caps_in_force((obj.get("status") or {}).get("allowanceLimits"))


def allowance_changed(event: Event) -> bool:
    """A Prepaid tenant's epoch caps changed (its Plan's TokenRateLimitPolicy limits change)."""
    if event.type is not EventType.UPDATED or event.old is None:
        return True
    return allowance_of(event.old) != allowance_of(event.obj)


def plan_of_generated(obj: FrozenObject) -> list[Request]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    ns, name = labels.get(names.PLAN_NAMESPACE_LABEL), labels.get(names.PLAN_LABEL)
    return [Request(str(ns), str(name))] if ns and name else []


class PlanReconciler:
    def __init__(self, ctx: BillingContext) -> None:
        self.ctx = ctx
        # The last revert per Plan and generation: the cached status may not show it yet when the revert's own
        # events trigger the next reconcile, and that reconcile must not report NoDrift over it.
        self._reverted: dict[str, tuple[int, str]] = {}

    # -- inputs ----------------------------------------------------------------------------------------
    def tenants(self, namespace: str, plan: str | None) -> tuple[Tenant, ...]:
        """The Plan's tenants (all of the namespace's when `plan` is None), with their wallet denial if any."""
        out = []
        for obj in self.ctx.cache.list(TENANT_ACCOUNT, namespace):
            spec = obj.get("spec") or {}
            if plan is not None and (spec.get("planRef") or {}).get("name") != plan:
                continue
            name, org = str(obj["metadata"]["name"]), identity.tenant_id(obj)
            status = obj.get("status") or {}
            state = status.get("state")
            denied = wallet.denial_message(name, org, TenantState(state)) if state in ENFORCED_STATES else None
            out.append(Tenant(name, org, denied, str(spec.get("gpuFreezeMode") or "Drain"), allowance_of(obj)))
        return tuple(sorted(out))

    def budgets(self, namespace: str) -> tuple[BudgetAction, ...]:
        """The namespace's BudgetPolicies whose Throttle or Freeze is in force (their ThresholdFired reason)."""
        out = []
        for obj in self.ctx.cache.list(BUDGET_POLICY, namespace):
            reason, message = fired_condition(obj)
            severity = budget.severity_of_reason(reason)
            if severity < budget.Severity.THROTTLE:
                continue
            spec = obj.get("spec") or {}
            tenant = self.ctx.cache.get(TENANT_ACCOUNT, str((spec.get("tenantRef") or {}).get("name")), namespace)
            if tenant is None:
                continue
            selector = ((spec.get("selector") or {}).get("keyLabels")) or {}
            freeze = severity == budget.Severity.FREEZE
            out.append(BudgetAction(str(obj["metadata"]["name"]), identity.tenant_id(tenant),
                                    tuple(sorted((str(k), str(v)) for k, v in selector.items())),
                                    "Freeze" if freeze else "Throttle", str(message or "") if freeze else ""))
        return tuple(sorted(out))

    def target(self, plan: Plan, namespace: str) -> FrozenObject | None:
        ref = plan.spec.target_ref
        gvk = GATEWAY if ref.kind == "Gateway" else HTTP_ROUTE
        if self.ctx.missing_apis(gvk):
            return None
        return self.ctx.cache.get(gvk, ref.name, namespace)

    # -- the reconcile ---------------------------------------------------------------------------------
    async def reconcile(self, req: Request) -> Result:
        ctx = self.ctx
        namespace = str(req.namespace)
        obj = ctx.cache.get(PLAN, req.name, namespace)
        if obj is None:
            self._reverted.pop(req.key, None)
            await self.prune(namespace, req.name, keep=set())
            return Result.done()
        try:
            plan = parse(Plan, thaw(obj))
        except ValidationError as exc:
            await ctx.event(obj, "Warning", "InvalidPlan", f"cannot read this Plan: {exc}"[:1024])
            return Result.done()
        missing_kuadrant = ctx.missing_apis(*KUADRANT_KINDS)
        missing_kueue = ctx.missing_apis(*KUEUE_KINDS)
        target = self.target(plan, namespace)
        geo = ((target or {}).get("metadata") or {}).get("labels", {}).get(names.GEO_LABEL)
        compiled = compile_plan(PlanInput(
            namespace=namespace, name=req.name, uid=str(obj["metadata"].get("uid", "")), spec=plan.spec,
            tenants=self.tenants(namespace, req.name), target_geo=geo, gpu_flavor=ctx.settings.gpu_flavor,
            denials=tuple(sorted({(t.organization, t.denied) for t in self.tenants(namespace, None) if t.denied})),
            fallback_denial=(maas_auth.DENIAL_MESSAGE, maas_auth.DENIAL_REASON), budgets=self.budgets(namespace)))
        try:
            for desired in compiled.objects:
                check_cel(desired)
        except CelError as exc:  # a compiler bug: never apply what the data plane could not evaluate
            await ctx.event(obj, "Warning", "InvalidPolicy", str(exc)[:1024])
            log.error("generated CEL does not compile", request=req.key, error=str(exc)[:500])
            await ctx.apply_status(obj, self.status(obj, plan, [], missing_kuadrant, missing_kueue, target, compiled,
                                                    invalid=str(exc)))
            return Result.done()
        outcomes = []
        for desired in compiled.objects:
            kind = GroupVersionKind.of(desired)
            if kind in missing_kuadrant or kind in missing_kueue:
                outcomes.append(Outcome(desired, up_to_date=False))
            else:
                outcomes.append(await self.sync(obj, desired, namespace, req.name))
        wanted = {(GroupVersionKind.of(o.obj), o.obj["metadata"]["name"]) for o in outcomes if o.conflict is None}
        await self.prune(namespace, req.name, keep=wanted)
        if any(o.obj["kind"] == "ClusterQueue" and o.up_to_date for o in outcomes):
            await self.ensure_flavor()
        previous = {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or ()}
        status = self.status(obj, plan, outcomes, missing_kuadrant, missing_kueue, target, compiled)
        await ctx.apply_status(obj, status)
        await self.announce(obj, previous, status["conditions"])
        waiting = missing_kuadrant or (missing_kueue and plan.spec.limits.gpu_quota is not None)
        if waiting or any(o.conflict for o in outcomes):
            # A CRD to appear, or a foreign object (not in our cache) to go away: look again in a while.
            return Result.requeue_after(ctx.settings.dependency_recheck_seconds)
        return Result.done()

    async def sync(self, plan: FrozenObject, desired: Mapping[str, Any], namespace: str, name: str) -> Outcome:
        """Apply one desired object unless a same-named object is not ours; revert and report external edits."""
        ctx = self.ctx
        gvk = GroupVersionKind.of(desired)
        meta = desired["metadata"]
        live: Mapping[str, Any] | None = ctx.cache.peek(gvk, meta["name"], meta.get("namespace"))
        if live is None:
            # The cache holds only our objects (label-selected): ask the server whether the name is taken.
            try:
                live = await ctx.client.get(gvk, meta["name"], meta.get("namespace"))
            except NotFound:
                live = None
        if live is not None and not is_ours(live, namespace, name):
            return Outcome(desired, up_to_date=False,
                           conflict=f"{desired['kind']} {meta['name']} exists and was not generated for this Plan")
        edits: list[str] = []
        hashes = [((o.get("metadata") or {}).get("annotations") or {}).get("billing.opendatahub.io/desired-hash")
                  for o in (live or {}, desired)]
        if live is not None and hashes[0] == hashes[1]:
            edits = drift.differences(live, desired)
        try:
            await ctx.applier.apply(desired)
            patch = drift.removal_patch(live, desired) if edits and live is not None else None
            if patch is not None:
                await ctx.client.patch(gvk, meta["name"], meta.get("namespace"), patch)
        except Invalid as exc:
            return Outcome(desired, up_to_date=False, error=str(exc)[:512], drift=tuple(edits),
                           revert_failed=bool(edits))
        if edits:
            await ctx.event(plan, "Warning", "DriftReverted",
                            f"{desired['kind']} {meta['name']} was edited outside the compiler "
                            f"({', '.join(edits)[:600]}); reverted")
        return Outcome(desired, up_to_date=True, drift=tuple(edits))

    async def prune(self, namespace: str, plan: str, keep: set[tuple[GroupVersionKind, str]]) -> None:
        """Delete this Plan's generated objects that are no longer wanted (never anything that is not ours)."""
        ctx = self.ctx
        labels = names.plan_labels(namespace, plan)
        for gvk in GENERATED_KINDS:
            if ctx.missing_apis(gvk):
                continue
            for live in ctx.cache.list(gvk, labels=labels):
                name = str(live["metadata"]["name"])
                if (gvk, name) in keep or not is_ours(live, namespace, plan):
                    continue
                try:
                    await ctx.client.delete(gvk, name, live["metadata"].get("namespace"))
                except NotFound:
                    continue
                log.info("deleted generated object", kind=gvk.kind, name=name, plan=f"{namespace}/{plan}")

    async def ensure_flavor(self) -> None:
        """Create the GPU ResourceFlavor if missing; an existing one (ours or an administrator's) is kept."""
        flavor = resource_flavor(self.ctx.settings.gpu_flavor)
        if self.ctx.cache.peek(RESOURCE_FLAVOR, flavor["metadata"]["name"]) is not None:
            return
        try:
            await self.ctx.client.get(RESOURCE_FLAVOR, flavor["metadata"]["name"])
        except NotFound:
            await self.ctx.applier.apply(flavor)

    # -- status ----------------------------------------------------------------------------------------
    def status(self, obj: FrozenObject, plan: Plan, outcomes: Sequence[Outcome], missing_kuadrant: list[Any],
               missing_kueue: list[Any], target: FrozenObject | None, compiled: Any,
               invalid: str | None = None) -> dict[str, Any]:
        generation = int(obj["metadata"].get("generation", 0))
        old = (obj.get("status") or {}).get("conditions")
        now = self.ctx.now_rfc3339()
        conflicts = [o.conflict for o in outcomes if o.conflict]
        errors = [f"{o.label}: {o.error}" for o in outcomes if o.error]
        drifted = [f"{o.label}: {', '.join(o.drift)}" for o in outcomes if o.drift]
        gpu = plan.spec.limits.gpu_quota is not None

        def cond(conds: Any, type_: str, status: str, reason: str, message: str) -> Any:
            return set_condition(conds, type_=type_, status=status, reason=reason, message=message[:4096],
                                 observed_generation=generation, now=now)

        c = old
        if invalid is not None:
            c = cond(c, COMPILED, "False", "InvalidPolicy", invalid)
        elif missing_kuadrant:
            c = cond(c, COMPILED, "False", "KuadrantNotInstalled", "Kuadrant is not installed: nothing was applied")
        elif conflicts:
            c = cond(c, COMPILED, "False", "AdoptionConflict", "; ".join(conflicts))
        elif errors:
            c = cond(c, COMPILED, "False", "ApplyFailed", "; ".join(errors))
        elif missing_kueue and gpu:
            c = cond(c, COMPILED, "False", "KueueNotInstalled",
                     "Kuadrant policies applied; gpuQuota needs Kueue's ClusterQueue CRD, which is not installed")
        else:
            c = cond(c, COMPILED, "True", "Compiled", f"{len(outcomes)} object(s) applied and up to date")
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        note = self._reverted.get(key)
        if drifted:
            failed = any(o.revert_failed for o in outcomes)
            message = ("could not revert: " if failed else "edited outside the compiler and reverted: ") + \
                "; ".join(drifted)
            c = cond(c, DRIFTED, "True" if failed else "False", "RevertFailed" if failed else "DriftReverted",
                     message)
            if not failed:
                self._reverted[key] = (generation, message)
        elif note is not None and note[0] == generation:
            c = cond(c, DRIFTED, "False", "DriftReverted", note[1])
        elif not self._keeps_revert_note(old, generation):
            c = cond(c, DRIFTED, "False", "NoDrift", "every generated object matches the Plan")
        c = cond(c, ADOPTION_CONFLICT, "True" if conflicts else "False", "NameInUse" if conflicts else "NoConflict",
                 "; ".join(conflicts) + ": rename or delete it; it is never overwritten" if conflicts
                 else "every generated name is free or ours")
        c = cond(c, KUADRANT_NOT_INSTALLED, "True" if missing_kuadrant else "False",
                 "CRDsMissing" if missing_kuadrant else "KuadrantInstalled",
                 "missing CRDs: " + ", ".join(f"{g.kind}.{g.group}" for g in missing_kuadrant) if missing_kuadrant
                 else "AuthPolicy, RateLimitPolicy and TokenRateLimitPolicy are served")
        ref = plan.spec.target_ref
        c = cond(c, GATEWAY_NOT_FOUND, "False" if target is not None else "True",
                 "TargetFound" if target is not None else "TargetNotFound",
                 f"{ref.kind} {obj['metadata']['namespace']}/{ref.name} "
                 + ("exists" if target is not None else "does not exist; the policies wait for it"))
        notes = list(compiled.unsupported)
        c = cond(c, UNSUPPORTED_FIELD, "True" if notes else "False",
                 "NotCompilable" if notes else "AllFieldsCompiled",
                 "; ".join(notes) if notes else "every field of the Plan is enforced")
        return {"compiledPolicies": [o.ref() for o in outcomes], "observedGeneration": generation, "conditions": c}

    @staticmethod
    def _keeps_revert_note(conditions: Any, generation: int) -> bool:
        for c in conditions or ():
            if c.get("type") == DRIFTED:
                return bool(c.get("reason") == "DriftReverted" and c.get("observedGeneration") == generation)
        return False

    async def announce(self, obj: FrozenObject, previous: Mapping[str, Any], current: Sequence[Mapping[str, Any]]
                       ) -> None:
        """One Event per condition that changed status (or reason), so `kubectl describe` tells the story."""
        for cond in current:
            before = previous.get(cond["type"]) or {}
            if (before.get("status"), before.get("reason")) == (cond["status"], cond["reason"]):
                continue
            bad = (cond["type"] == COMPILED) != (cond["status"] == "True")
            if cond["type"] == DRIFTED and cond["reason"] in ("NoDrift", "DriftReverted"):
                continue  # drift is announced when reverted (sync)
            if not before and not bad:
                continue  # a fresh Plan: only problems are news
            await self.ctx.event(obj, "Warning" if bad else "Normal", cond["reason"], cond["message"][:1024])


__all__ = ["PlanReconciler", "allowance_changed", "allowance_of", "is_ours", "plan_of_generated", "plans_of_tenant",
           "wallet_state_changed"]
