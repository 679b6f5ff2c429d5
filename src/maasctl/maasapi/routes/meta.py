"""`/health` and `/metrics`."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from maasctl.maasapi.deps import StateDep
from maasctl.maasapi.errors import ApiError, error_body
from maasctl.maasapi.schemas import Health

router = APIRouter()


@router.get("/health", response_model=Health, tags=["meta"])
async def health(st: StateDep) -> Health:
    if st.store is None:
        raise ApiError(503, "not_ready", "maas-api is starting")
    return Health()


@router.get("/metrics", include_in_schema=False)
async def metrics(st: StateDep) -> Response:
    if not st.settings.metrics_enabled:
        return JSONResponse(error_body("not_found", "metrics disabled", status=404), status_code=404)
    return Response(generate_latest(st.metrics.registry), media_type=CONTENT_TYPE_LATEST)
