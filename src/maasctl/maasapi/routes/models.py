"""`/v1/models`: the models a caller can use, checked by probing each with the caller's own credentials.

The reference's shape: `id` is the name clients send as `model` (the MaaSModelRef's `status.resolvedModelAlias`,
e.g. the ExternalModel's name), `owned_by` the MaaSModelRef as `namespace/name`, `subscriptions[]` objects
`{name, displayName, description}`, `modelDetails` from the MaaSModelRef's display annotations. A token caller
naming a subscription it cannot use (unknown or not its own) gets 403, as in the reference; an API key is listed
under its bound subscription whatever `X-MaaS-Subscription` it sends (`contract.selection`, the gateway's rule).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Request, Response

from maasctl.contract.selection import find, rank
from maasctl.maasapi.deps import ERROR_RESPONSES, Caller, StateDep, subscriptions_of
from maasctl.maasapi.errors import ApiError
from maasctl.maasapi.models import PROBE_HEADER, accessible
from maasctl.maasapi.routes.views import subscription_info
from maasctl.maasapi.schemas import ModelDetails, ModelList, ModelView, SubscriptionInfo

router = APIRouter(tags=["models"], responses=ERROR_RESPONSES)


@router.get("/v1/models", response_model=ModelList, response_model_exclude_none=True)
async def list_models(
    request: Request,
    response: Response,
    st: StateDep,
    caller: Caller,
    x_maas_subscription: Annotated[str | None, Header(max_length=317)] = None,
) -> ModelList:
    response.headers["Cache-Control"] = "no-store"
    if request.headers.get(PROBE_HEADER) is not None:
        # one of our own probes came back here (a route to maas-api): answer it as "not a model", never probe again
        raise ApiError(508, "probe_loop", "a model probe reached maas-api's /v1/models; it is not a model")
    if st.models is None or st.probe_http is None:
        raise ApiError(503, "models_unavailable", "the model catalogue is not configured")
    subs = await subscriptions_of(st)
    default_ns = st.settings.subscription_namespace
    # an API key's binding wins over the header, as at the gateway: the header is neither used nor forwarded
    asked = None if caller.via == "api_key" else x_maas_subscription
    if caller.via == "api_key":
        bound = find(subs, caller.key_subscription or "", default_ns)
        chosen = [bound] if bound is not None and bound.usable else []
    elif asked:
        wanted = find(subs, asked, default_ns)
        if wanted is None or not wanted.entitles(caller.username, caller.groups):
            raise ApiError(403, "subscription_not_found", "subscription not found or not accessible")
        chosen = [wanted] if wanted.usable else []
    else:
        chosen = [s for s in subs if s.entitles(caller.username, caller.groups) and s.usable]
    serving: dict[str, list[SubscriptionInfo]] = {}
    for sub in rank(chosen):
        for ref in sub.models:
            serving.setdefault(ref.key, []).append(subscription_info(sub, default_ns))
    try:
        all_models = await st.models.list_models()
    except Exception as exc:
        raise ApiError(503, "models_unavailable", "models cannot be read right now") from exc
    candidates = [m for m in all_models if m.key in serving and m.ready]
    headers = {name: value for name, value in (("Authorization", request.headers.get("authorization")),
                                                ("X-Api-Key", request.headers.get("x-api-key"))) if value}
    if asked:
        headers["X-MaaS-Subscription"] = asked
    allowed = await accessible(
        st.probe_http,
        candidates,
        headers,
        per_probe=st.settings.model_probe_timeout,
        deadline=st.settings.models_deadline,
        gateway_origins=st.settings.gateway_origins,
    )
    return ModelList(
        data=[
            ModelView(
                id=m.model_id,
                created=m.created,
                owned_by=m.key,
                kind=m.kind,
                url=m.endpoint,
                ready=True,
                model_details=ModelDetails(display_name=m.display_name, description=m.description)
                if m.display_name or m.description else None,
                subscriptions=serving[m.key],
            )
            for m in allowed
        ]
    )
