"""maasctl.runtime: a controller-runtime-style framework on kubernetes-asyncio. It knows nothing about MaaS.

Tour: ``client`` (typed-error API calls, SSA), ``gvk`` (kinds and discovery), ``informer``/``store``/``cache``
(list+watch into a shared read-only cache), ``workqueue`` (dedup, backoff, priorities), ``controller``
(builder, Request/Result, workers), ``predicates``, ``leaderelection``, ``manager`` (runs it all, probes,
metrics), ``run`` (the one run loop of every operator process: signals, tasks beside it, exit codes),
and helpers ``apply`` (no-op-guarded SSA), ``finalizers``, ``conditions``, ``events``.
"""

from maasctl.runtime.apply import Applier, Change, is_unchanged
from maasctl.runtime.cache import Cache, CacheOptions
from maasctl.runtime.client import Client
from maasctl.runtime.conditions import find_condition, is_true, remove_condition, set_condition
from maasctl.runtime.controller import (
    Controller,
    ControllerBuilder,
    OwnerLabels,
    Reconciler,
    Request,
    Result,
)
from maasctl.runtime.errors import (
    ApiError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    LeaderElectionLost,
    NotFound,
    NotLeader,
    ServerError,
    TerminalError,
    TooManyRequests,
    Unauthorized,
)
from maasctl.runtime.events import EventRecorder
from maasctl.runtime.finalizers import add_finalizer, finalize, has_finalizer, remove_finalizer
from maasctl.runtime.gvk import GroupVersionKind, ResourceInfo, RestMapper
from maasctl.runtime.informer import Event, EventType, Informer
from maasctl.runtime.leaderelection import LeaderElectionOptions, LeaderElector
from maasctl.runtime.manager import Manager, ManagerOptions
from maasctl.runtime.metrics import Metrics
from maasctl.runtime.objects import canonical, freeze, is_deleting, key_of, thaw
from maasctl.runtime.run import Lifetime, run_manager, stop_on_signals
from maasctl.runtime.workqueue import FakeClock, Priority, RateLimiter, WorkQueue

__all__ = [
    "ApiError",
    "Applier",
    "Cache",
    "CacheOptions",
    "Change",
    "Client",
    "Conflict",
    "Controller",
    "ControllerBuilder",
    "Event",
    "EventRecorder",
    "EventType",
    "FakeClock",
    "Forbidden",
    "Gone",
    "GroupVersionKind",
    "Informer",
    "Invalid",
    "LeaderElectionLost",
    "LeaderElectionOptions",
    "LeaderElector",
    "Lifetime",
    "Manager",
    "ManagerOptions",
    "Metrics",
    "NotFound",
    "NotLeader",
    "OwnerLabels",
    "Priority",
    "RateLimiter",
    "Reconciler",
    "Request",
    "ResourceInfo",
    "RestMapper",
    "Result",
    "ServerError",
    "TerminalError",
    "TooManyRequests",
    "Unauthorized",
    "WorkQueue",
    "add_finalizer",
    "canonical",
    "finalize",
    "find_condition",
    "freeze",
    "has_finalizer",
    "is_deleting",
    "is_true",
    "is_unchanged",
    "key_of",
    "remove_condition",
    "remove_finalizer",
    "run_manager",
    "set_condition",
    "stop_on_signals",
    "thaw",
]
