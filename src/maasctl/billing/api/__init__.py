"""Pydantic models of the seven billing kinds (billing.opendatahub.io/v1alpha1), the source of their CRDs."""

from maasctl.api._base import KubeObject
from maasctl.billing.api._base import API_VERSION, GROUP, VERSION, BillingObject
from maasctl.billing.api.budget import BudgetPolicy
from maasctl.billing.api.connector import BillingConnector
from maasctl.billing.api.console import BillingConsole
from maasctl.billing.api.plan import Plan, PlanLimits, PlanSpec, PolicyTargetReference
from maasctl.billing.api.pricebook import PriceBook, PriceBookSpec, PriceBookState
from maasctl.billing.api.reservation import Reservation
from maasctl.billing.api.tenant import TenantAccount

KINDS: tuple[type[KubeObject], ...] = (PriceBook, Plan, TenantAccount, BillingConnector, BudgetPolicy, BillingConsole,
                                       Reservation)

__all__ = [
    "API_VERSION",
    "GROUP",
    "KINDS",
    "VERSION",
    "BillingConnector",
    "BillingConsole",
    "BillingObject",
    "BudgetPolicy",
    "Plan",
    "PlanLimits",
    "PlanSpec",
    "PolicyTargetReference",
    "PriceBook",
    "PriceBookSpec",
    "PriceBookState",
    "Reservation",
    "TenantAccount",
]
