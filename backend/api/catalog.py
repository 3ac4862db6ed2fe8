"""/v1/regions and /v1/instance-types: the catalog with prices, rules and capacity available now.

Prices are decimal strings (exact; parse them as decimals). The rules are the ones the API enforces
with 422, published so clients can check a spec before sending it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from starlette.responses import Response

from backend.api.deps import Reader
from backend.api.schemas import READ_ERRORS
from backend.api.state import app_state
from backend.billing.money import usd_text
from backend.billing.pricing import reserved_gpu_hour
from backend.domain.catalog import Catalog
from backend.domain.cluster_rules import rules_for
from backend.provisioning import reservations
from backend.provisioning.allocator import SLOT, pool_name
from backend.provisioning.drivers import offered_orchestrators
from backend.store.billing_models import CapacityReservation
from backend.store.engine_models import Allocation

router = APIRouter(prefix="/v1", tags=["catalog"])


class FabricOut(BaseModel):
    name: str
    kind: str = Field(description="infiniband, efa or ethernet")
    scalable_units: int
    leaves: int
    spines: int
    nodes_per_scalable_unit: int


class RegionOut(BaseModel):
    name: str
    display_name: str
    interconnects: list[str]
    fabrics: list[FabricOut]
    storage_usd_per_tib_hour: str
    reserved_ip_usd_per_hour: str = Field(description="A reserved public IP per hour while unattached")
    reserved_ip_attached_usd_per_hour: str = Field(
        description="A reserved public IP per hour while a cluster's login node answers on it"
    )


class ReservedPriceOut(BaseModel):
    min_duration_days: int
    discount: str = Field(description="Fraction off on-demand, e.g. \"0.25\"")
    usd_per_gpu_hour: str = Field(description="Exact, as charged (a decimal string, never rounded)")


class AvailabilityOut(BaseModel):
    region: str
    fabric: str
    interconnect: str
    capacity_nodes: int
    available_nodes: int = Field(description="Nodes free now (held by no cluster or capacity reservation)")
    spot_capacity_nodes: int = Field(description="Nodes of the pool sold as spot (the region's spot share)")


class InstanceTypeOut(BaseModel):
    name: str
    gpu_model: str
    gpu_count: int
    gpu_memory_mib: int
    vcpu: int
    ram_gib: int
    local_nvme: str
    network: str
    interconnects: list[str]
    fabric_capable: bool = Field(description="Multi-node clusters need a fabric-capable type")
    on_demand_usd_per_gpu_hour: str
    on_demand_usd_per_node_hour: str
    spot_usd_per_gpu_hour: str = Field(description="capacity_type = spot: on-demand less the spot discount")
    reserved: list[ReservedPriceOut]
    rules: dict[str, Any]
    availability: list[AvailabilityOut]


class RegionList(BaseModel):
    items: list[RegionOut]


class InstanceTypeList(BaseModel):
    items: list[InstanceTypeOut]


def _held(session: Session) -> dict[str, int]:
    """Slots per pool held by nodes, or by capacity reservations for the clusters that draw from them."""
    rows = session.execute(select(Allocation.pool, func.count()).where(Allocation.kind == SLOT)
                           .group_by(Allocation.pool))
    held = {pool: int(count) for pool, count in rows}
    now = dt.datetime.now(dt.UTC)
    for reservation in session.scalars(select(CapacityReservation).where(
            CapacityReservation.ends_at > now, CapacityReservation.deleted_at.is_(None))):
        held[reservation.pool] = held.get(reservation.pool, 0) + reservations.free_nodes(session, reservation)
    return held


def instance_types(catalog: Catalog, held: dict[str, int]) -> list[InstanceTypeOut]:
    out = []
    for itype in catalog.instance_types:
        availability = [
            AvailabilityOut(region=f.region, fabric=f.name, interconnect=f.kind,
                            capacity_nodes=int(f.pools[itype.name]),
                            available_nodes=max(0, int(f.pools[itype.name])
                                                - held.get(pool_name(f.region, f.name, itype.name), 0)),
                            spot_capacity_nodes=catalog.spot_capacity(f.region, f.name, itype.name))
            for f in catalog.fabrics if f.pools.get(itype.name)
        ]
        # Exact, as charged (3.99 x 0.90 = 3.591, not 3.59): the meter's rate for a term of `days`.
        reserved = [
            ReservedPriceOut(min_duration_days=days, discount=str(discount),
                             usd_per_gpu_hour=usd_text(reserved_gpu_hour(itype.on_demand_usd_per_gpu_hour,
                                                                         discount)))
            for days, discount in sorted(catalog.reserved_discounts.items())
        ]
        spot_price = itype.on_demand_usd_per_gpu_hour * (1 - catalog.spot_discount)
        out.append(InstanceTypeOut(
            name=itype.name, gpu_model=itype.gpu_model, gpu_count=itype.gpu_count,
            gpu_memory_mib=itype.gpu_memory_mib, vcpu=itype.vcpu, ram_gib=itype.ram_gib,
            local_nvme=itype.local_nvme, network=itype.network, interconnects=list(itype.interconnects),
            fabric_capable=itype.fabric_capable,
            on_demand_usd_per_gpu_hour=str(itype.on_demand_usd_per_gpu_hour),
            on_demand_usd_per_node_hour=str(itype.on_demand_usd_per_node_hour),
            spot_usd_per_gpu_hour=f"{spot_price.normalize():f}",
            reserved=reserved,
            rules=rules_for(itype.name, catalog, offered_orchestrators()), availability=availability,
        ))
    return out


@router.get("/regions", response_model=RegionList, responses=READ_ERRORS)
def list_regions(request: Request, principal: Reader) -> Response:
    """Regions with their fabrics (scalable units, leaves, spines), storage and reserved IP prices."""
    catalog = app_state(request).catalog
    items = [
        RegionOut(
            name=r.name, display_name=r.display_name, interconnects=catalog.interconnects_in(r.name),
            fabrics=[FabricOut(name=f.name, kind=f.kind, scalable_units=f.scalable_units, leaves=f.leaves,
                               spines=f.spines, nodes_per_scalable_unit=f.nodes_per_su)
                     for f in catalog.fabrics_in(r.name)],
            storage_usd_per_tib_hour=str(catalog.storage_usd_per_tib_hour),
            reserved_ip_usd_per_hour=str(catalog.reserved_ip_usd_per_hour),
            reserved_ip_attached_usd_per_hour=str(catalog.reserved_ip_attached_usd_per_hour),
        )
        for r in catalog.regions
    ]
    return Response(RegionList(items=items).model_dump_json(), media_type="application/json")


@router.get("/instance-types", response_model=InstanceTypeList, responses=READ_ERRORS)
def list_instance_types(request: Request, principal: Reader) -> Response:
    """Instance types: shape, prices (on-demand and reserved), rules and capacity available now."""
    state = app_state(request)
    with state.read_sessions() as session:
        held = _held(session)
    body = InstanceTypeList(items=instance_types(state.catalog, held))
    return Response(body.model_dump_json(), media_type="application/json")
