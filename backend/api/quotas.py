"""/v1/quotas: the project's quotas (set by the cloud's operator) next to what the project holds."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from backend.api.deps import Reader
from backend.api.schemas import READ_ERRORS
from backend.api.state import app_state
from backend.domain.quotas import usd
from backend.services import quotas

router = APIRouter(prefix="/v1/quotas", tags=["quotas"])
NO_LIMIT = "null: no limit"


class QuotasOut(BaseModel):
    """Quotas apply to the whole project, whatever the API key's team scope."""

    max_clusters: int | None = Field(description=f"Most clusters the project may hold ({NO_LIMIT})")
    clusters_in_use: int = Field(description="Clusters held: every cluster whose deletion is not requested")
    max_gpus: int | None = Field(description=f"Most GPUs its clusters may hold ({NO_LIMIT})")
    gpus_in_use: int = Field(description="GPUs held: node_count x GPUs per node over the clusters held")
    max_hourly_usd: str | None = Field(
        description=f"Most USD per hour its clusters may cost, exact decimal string ({NO_LIMIT})"
    )
    hourly_usd_in_use: str = Field(
        description="USD per hour of the clusters held (the sum of their estimated_hourly_cost_usd)"
    )
    updated_at: datetime | None = Field(description="When an operator last set a quota (null: never)")




@router.get("", response_model=QuotasOut, responses=READ_ERRORS)
def get_quotas(request: Request, principal: Reader) -> Response:
    """The project's quotas and current use. Creates and scale-ups past a quota answer 403
    `quota_exceeded`; operators set quotas with `gpucloud-backend set-quota`."""
    state = app_state(request)
    with state.read_sessions() as session:
        view = quotas.quota_view(session, state.catalog, principal.project_id)
    limit, in_use = view.pop("max_hourly_micros"), view.pop("hourly_micros_in_use")
    body = QuotasOut(**view, max_hourly_usd=None if limit is None else str(usd(limit)),
                     hourly_usd_in_use=str(usd(in_use)))
    return Response(body.model_dump_json(), media_type="application/json")
