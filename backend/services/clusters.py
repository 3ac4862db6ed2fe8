"""Cluster use cases: create, list, get, partial update, delete, attach/detach volumes.

The declared spec is validated in full (engine rules, references, the cost ceiling) before anything is
stored; every accepted write asks the engine to reconcile in the same transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, TypeVar

from sqlalchemy import bindparam, literal, or_, select, union_all
from sqlalchemy.orm import Session, joinedload

from backend.billing.account import check_admission_allowed, check_attach_allowed, first_charge_micros
from backend.billing.budgets import check_budget_admission
from backend.billing.estimate import estimate_cluster_cost
from backend.billing.pricing import PricingError
from backend.billing.reports import reserved_node_count
from backend.domain.access import Scope
from backend.domain.catalog import Catalog
from backend.domain.clock import utcnow
from backend.domain.cluster_rules import apply_cluster_defaults, validate_cluster_spec
from backend.domain.errors import Conflict, FieldError, NotFound, validation_failed
from backend.domain.ids import is_id_of, new_id
from backend.domain.lifetime import parse_ttl
from backend.provisioning.engine import request_reconcile
from backend.provisioning.scale_down import DEFAULT_GRACE_MINUTES
from backend.provisioning.views import JOINED_STATE_COLUMNS
from backend.services import container_images, pool_clusters, quotas, reserved_ips
from backend.services.reservations import check_reservation
from backend.services.security_groups import ensure_default_group
from backend.store.db import execute_core
from backend.store.engine_models import EngineCluster
from backend.store.models import (
    Cluster,
    ClusterSecurityGroup,
    ClusterSshKey,
    ClusterVolume,
    SecurityGroup,
    SshKey,
    Volume,
)
from backend.store.repository import (
    check_if_match,
    get_owned,
    in_scope,
    keyset_page,
    owned_select,
    referenced,
    scoped_labels,
    touch,
)

# Fields a PATCH may not change (a different value needs a new cluster).
IMMUTABLE_FIELDS = (
    "region", "instance_type", "orchestrator", "interconnect", "capacity_type", "reservation_id",
    "host_pool_id",
)
IMMUTABLE_BILLING_FIELDS = ("type", "duration_days")
DESTROYED = "DESTROYED"
GENERATED_PARTITION, GENERATED_QOS = "gpu", "normal"  # every Slurm cluster has them
SLURM_SCRIPT_ROOT = "/mnt/shared/"  # where the nodes mount shared volumes
MICROS = Decimal(1_000_000)
_LINKS_JOINED = (
    joinedload(Cluster.ssh_key_links),
    joinedload(Cluster.volume_links),
    joinedload(Cluster.security_group_links),
)
# The GET path reads with two prebuilt Core statements (built and cache-keyed once, no ORM instances):
# the cluster row with its engine state (outer-joined: one query instead of two, see provisioning.views),
# then its SSH key, volume and security group links together.
_CLUSTER_ROW = (
    # Every column but the sealed registry credentials (only an import opens them).
    select(*(c for c in Cluster.__table__.c if c.key != "registry_credentials"), *JOINED_STATE_COLUMNS)
    .select_from(Cluster.__table__.outerjoin(EngineCluster.__table__, EngineCluster.cluster_id == Cluster.id))
    .where(Cluster.id == bindparam("cluster_id"))
)
_CLUSTER_LINKS = union_all(
    select(literal("ssh_key").label("kind"), ClusterSshKey.ssh_key_id.label("ref"), ClusterSshKey.position)
    .where(ClusterSshKey.cluster_id == bindparam("cluster_id")),
    select(literal("volume").label("kind"), ClusterVolume.volume_id.label("ref"), ClusterVolume.position)
    .where(ClusterVolume.cluster_id == bindparam("cluster_id")),
    select(literal("security_group").label("kind"), ClusterSecurityGroup.security_group_id.label("ref"),
           ClusterSecurityGroup.position)
    .where(ClusterSecurityGroup.cluster_id == bindparam("cluster_id")),
)


def cluster_spec(row: Cluster) -> dict[str, Any]:
    """The declared spec of a stored cluster, as the API returns it."""
    return spec_of(
        row, [link.ssh_key_id for link in row.ssh_key_links], [link.volume_id for link in row.volume_links],
        [link.security_group_id for link in row.security_group_links],
    )


def spec_of(
    row: Any, ssh_key_ids: list[str], volume_ids: list[str], security_group_ids: list[str]
) -> dict[str, Any]:
    """The declared spec from a cluster row (ORM or Core, same column names) and its link ids."""
    return {
        "name": row.name,
        "region": row.region,
        "instance_type": row.instance_type,
        "node_count": row.node_count,
        "orchestrator": row.orchestrator,
        "interconnect": row.interconnect,
        "container": row.container,
        "ssh_key_ids": ssh_key_ids,
        "volume_ids": volume_ids,
        "security_group_ids": security_group_ids,
        "billing": {
            "type": row.billing_type,
            "duration_days": row.billing_duration_days,
            "on_expiry": row.billing_on_expiry,
        },
        "reservation_id": row.reservation_id,
        "host_pool_id": row.host_pool_id,
        "labels": dict(row.labels),
        "deletion_protection": row.deletion_protection,
        "max_hourly_cost_usd": (
            Decimal(row.max_hourly_cost_micros) / MICROS if row.max_hourly_cost_micros is not None else None
        ),
        "node_repair": row.node_repair,
        "capacity_type": row.capacity_type,
        "ttl": row.ttl,
        "expires_at": row.expires_at,
        "idle_teardown_minutes": row.idle_teardown_minutes,
        "scale_down_grace_minutes": row.scale_down_grace_minutes,
        "autoscaling": autoscaling_of(row),
        "reserved_ip_id": row.reserved_ip_id,
        "slurm_config": row.slurm_config,
        "container_images": dict(row.container_images or {}),
    }


def autoscaling_of(row: Any) -> dict[str, int] | None:
    """The cluster's autoscaling range as the API writes it (None: a fixed node_count)."""
    if row.autoscaling_min_nodes is None:
        return None
    return {"min_nodes": row.autoscaling_min_nodes, "max_nodes": row.autoscaling_max_nodes,
            "scale_down_idle_minutes": row.autoscaling_idle_minutes}


def estimated_hourly_cost(spec: Mapping[str, Any], catalog: Catalog) -> Decimal:
    """The hourly cost of a (valid) spec from the billing estimate."""
    return estimate_cluster_cost(spec, catalog).hourly_usd


def _check_spec(
    session: Session,
    catalog: Catalog,
    project_id: str,
    spec: Mapping[str, Any],
    attached: Sequence[str] = (),
    reserved_nodes: int | None = None,
    current: Mapping[str, Any] | None = None,
    scope: Scope | None = None,
) -> dict[str, Any]:
    """The spec with defaults applied; 422 naming every offending field, 402 when billing refuses to
    attach more storage to a project out of credits (`attached`: volumes already attached;
    `reserved_nodes`: the size of the cluster's started reserved term, priced as such; `current`: the
    spec an update changes, whose cost the ceiling compares against; `scope`: the caller's team scope,
    outside which new references are not found)."""
    full = apply_cluster_defaults(spec, catalog)
    errors = [FieldError(e.path, e.code, e.message) for e in validate_cluster_spec(full, catalog)]
    kept = {
        *(current or {}).get("ssh_key_ids", []),
        *(current or {}).get("volume_ids", []),
        *(current or {}).get("security_group_ids", []),
    }
    errors += _check_references(session, project_id, full, scope, kept)
    errors += check_slurm_config(full)
    errors += container_images.check(full, catalog)
    if full.get("reservation_id") not in (None, (current or {}).get("reservation_id")):
        errors += check_reservation(session, project_id, full, scope)
    if full.get("host_pool_id") is not None:
        errors += pool_clusters.check(session, project_id, full, scope)
    errors += reserved_ips.check_reference(
        session, project_id=project_id, scope=scope, reserved_ip_id=full.get("reserved_ip_id"),
        region=str(full.get("region")), kept=(current or {}).get("reserved_ip_id"),
    )
    if not errors:
        errors += _check_cost(full, catalog, reserved_nodes, current)
    if errors:
        raise validation_failed(errors)
    if set(full.get("volume_ids") or []) - set(attached):
        check_attach_allowed(session, project_id=project_id, now=utcnow())
    return full


def _plain(value: Any) -> Any:
    """A request model (the PATCH body's `slurm_config`) as the plain dict stored and compared."""
    dump = getattr(value, "model_dump", None)
    return dump() if callable(dump) else value


def check_slurm_config(spec: Mapping[str, Any]) -> list[FieldError]:
    """The rules of `slurm_config` between its fields and with the rest of the spec: Slurm clusters only;
    partition and QoS names unique and not the generated ones (`gpu`, `normal`); one default partition at
    most; a default time within the maximum; prolog and epilog on a volume attached to the cluster."""
    config = spec.get("slurm_config")
    if not isinstance(config, Mapping):
        return []
    if spec.get("orchestrator") != "slurm":
        orchestrator = spec.get("orchestrator")
        return [FieldError("slurm_config", "requires_slurm",
                           f"slurm_config needs orchestrator slurm (this cluster's is {orchestrator})")]
    errors: list[FieldError] = []
    for kind, reserved in (("partitions", GENERATED_PARTITION), ("qos", GENERATED_QOS)):
        seen: set[str] = set()
        for index, item in enumerate(config.get(kind) or []):
            name, path = item.get("name"), f"slurm_config.{kind}[{index}].name"
            if name == reserved:
                errors.append(FieldError(path, "reserved_name",
                                         f"{name} is generated for every Slurm cluster; choose another name"))
            elif name in seen:
                errors.append(FieldError(path, "duplicate_name", f"{name} is declared twice in {kind}"))
            seen.add(str(name))
    partitions = list(config.get("partitions") or [])
    for index, part in enumerate(partitions):
        if int(part.get("default_time_minutes") or 0) > int(part.get("max_time_minutes") or 0):
            errors.append(FieldError(
                f"slurm_config.partitions[{index}].default_time_minutes", "above_max_time",
                f"default_time_minutes {part.get('default_time_minutes')} is above max_time_minutes "
                f"{part.get('max_time_minutes')} of partition {part.get('name')}",
            ))
    defaults = [index for index, part in enumerate(partitions) if part.get("default")]
    for index in defaults[1:]:
        errors.append(FieldError(
            f"slurm_config.partitions[{index}].default", "multiple_defaults",
            f"only one partition may be the default; {partitions[defaults[0]].get('name')} already is",
        ))
    volumes = list(spec.get("volume_ids") or [])
    for key in ("prolog", "epilog"):
        script = config.get(key)
        if not isinstance(script, str):
            continue
        parts = script.split("/")  # "", "mnt", "shared", <volume id>, ...
        if any(part in (".", "..") for part in parts[4:]):
            errors.append(FieldError(f"slurm_config.{key}", "invalid_path",
                                     f"{key} {script} must not contain '.' or '..' segments"))
        elif len(parts) < 5 or parts[3] not in volumes:
            attached = ", ".join(f"{SLURM_SCRIPT_ROOT}{v}" for v in volumes) or "none"
            errors.append(FieldError(
                f"slurm_config.{key}", "not_on_attached_volume",
                f"{key} {script} is not on a shared volume attached to the cluster (attached: {attached}); "
                "attach the volume in volume_ids",
            ))
    return errors


Referenced = TypeVar("Referenced", SshKey, Volume, SecurityGroup)


def _owned(
    session: Session, model: type[Referenced], ids: list[str], project_id: str, scope: Scope | None,
    kept: set[str],
) -> Sequence[Referenced]:
    """The rows of `ids` the caller may reference: in its project and scope, or already referenced
    (`kept`: a scoped key may keep what an unscoped one attached)."""
    if not ids:
        return []
    return referenced(session, model, ids, project_id=project_id, scope=scope, kept=kept)


def _check_references(
    session: Session, project_id: str, spec: Mapping[str, Any], scope: Scope | None, kept: set[str]
) -> list[FieldError]:
    key_ids, volume_ids = list(spec.get("ssh_key_ids") or []), list(spec.get("volume_ids") or [])
    keys = {
        r.id
        for r in _owned(
            session, SshKey, [i for i in key_ids if is_id_of("ssh_key", i)], project_id, scope, kept
        )
    }
    volumes = {
        r.id: r.region
        for r in _owned(
            session, Volume, [i for i in volume_ids if is_id_of("volume", i)], project_id, scope, kept
        )
    }
    errors = _check_list("ssh_key_ids", "SSH key", key_ids, keys)
    errors += _check_list("volume_ids", "volume", volume_ids, set(volumes))
    group_ids = list(spec.get("security_group_ids") or [])
    groups = {
        r.id
        for r in _owned(
            session, SecurityGroup, [i for i in group_ids if is_id_of("security_group", i)], project_id,
            scope, kept,
        )
    }
    errors += _check_list("security_group_ids", "security group", group_ids, groups)
    region = spec.get("region")
    for index, ref in enumerate(volume_ids):
        if ref in volumes and volumes[ref] != region:
            message = f"volume {ref} is in {volumes[ref]}, the cluster in {region}"
            errors.append(FieldError(f"volume_ids[{index}]", "region_mismatch", message))
    return errors


def _check_list(field: str, label: str, ids: list[str], existing: set[str]) -> list[FieldError]:
    errors, seen = [], set()
    for index, ref in enumerate(ids):
        if ref in seen:
            errors.append(FieldError(f"{field}[{index}]", "duplicate", f"{ref} is listed twice"))
        elif ref not in existing:
            errors.append(
                FieldError(f"{field}[{index}]", "not_found", f"no {label} with id {ref!r} in this project")
            )
        seen.add(ref)
    return errors


def _check_cost(
    spec: Mapping[str, Any], catalog: Catalog, reserved_nodes: int | None, current: Mapping[str, Any] | None
) -> list[FieldError]:
    """The ceiling refuses a create, or an update that raises the cost above it: a cost already above a
    lowered ceiling never blocks changes that do not raise it (labels, the ceiling itself, a scale-down).
    The cost is the most the cluster price allows per hour (spot_with_fallback: its on-demand stand-ins)."""
    try:
        price = estimate_cluster_cost(spec, catalog, reserved_node_count=reserved_nodes)
    except PricingError as error:
        return [FieldError(error.field, "no_price", error.message)]
    hourly, ceiling = price.max_hourly_usd, spec.get("max_hourly_cost_usd")
    if ceiling is None or hourly <= Decimal(ceiling):
        return []
    if current is not None:
        try:
            before = estimate_cluster_cost(current, catalog, reserved_node_count=reserved_nodes)
            before_hourly: Decimal | None = before.max_hourly_usd
        except PricingError:
            before_hourly = None
        if before_hourly is not None and hourly <= before_hourly:
            return []
    fallback = " with on-demand nodes standing in for spot" if hourly != price.hourly_usd else ""
    return [
        FieldError(
            "max_hourly_cost_usd",
            "cost_limit_exceeded",
            f"the cluster would cost {hourly} USD per hour{fallback}, above max_hourly_cost_usd {ceiling}",
        )
    ]


def lifetime_changes(
    changes: Mapping[str, Any], *, current: Mapping[str, Any] | None, created_at: datetime, now: datetime
) -> dict[str, Any]:
    """`ttl` and `expires_at` as stored after a create (`current` None) or a partial update: a ttl sets
    expires_at to created_at + ttl, an expires_at clears the ttl, null clears both (422 naming the field
    when both are given, the time is past or has no time zone, or the cluster is already older)."""
    ttl, expires_at = changes.get("ttl"), changes.get("expires_at")
    if ttl is not None and expires_at is not None:
        raise validation_failed([FieldError(
            "ttl", "conflicting_fields", "set ttl or expires_at, not both (ttl sets expires_at)"
        )])
    if ttl is not None:
        try:
            lifetime = parse_ttl(str(ttl))
        except ValueError as error:
            raise validation_failed([FieldError("ttl", "invalid_ttl", str(error))]) from None
        if current is not None and current.get("ttl") == ttl:
            return {}
        if created_at + lifetime <= now:
            raise validation_failed([FieldError(
                "ttl", "already_elapsed",
                f"the cluster was created at {created_at:%Y-%m-%dT%H:%M:%SZ} and is already older than "
                f"{ttl}; choose a longer ttl, or delete the cluster",
            )])
        # Whole seconds: the provider plans the same value from created_at + ttl.
        return {"ttl": ttl, "expires_at": (created_at + lifetime).replace(microsecond=0)}
    if expires_at is not None:
        if not isinstance(expires_at, datetime) or expires_at.tzinfo is None:
            raise validation_failed([FieldError(
                "expires_at", "invalid_datetime", "expires_at needs a time zone, e.g. 2026-12-01T18:00:00Z"
            )])
        unchanged = current is not None and current.get("expires_at") == expires_at
        if expires_at <= now and not unchanged:
            raise validation_failed([FieldError(
                "expires_at", "in_the_past",
                f"expires_at {expires_at.isoformat()} has passed; use a later time",
            )])
        return {"ttl": None, "expires_at": expires_at}
    if "ttl" in changes or "expires_at" in changes:
        return {"ttl": None, "expires_at": None}
    return {}


def _apply(row: Cluster, spec: Mapping[str, Any]) -> None:
    billing = spec["billing"]
    row.name, row.region, row.instance_type = spec["name"], spec["region"], spec["instance_type"]
    row.node_count, row.orchestrator, row.interconnect = (
        spec["node_count"],
        spec["orchestrator"],
        spec["interconnect"],
    )
    row.container = spec.get("container")
    row.billing_type, row.billing_duration_days = billing["type"], billing.get("duration_days")
    row.billing_on_expiry = billing.get("on_expiry")
    row.reservation_id = spec.get("reservation_id")
    row.host_pool_id = spec.get("host_pool_id")
    row.labels = dict(spec.get("labels") or {})
    row.deletion_protection = bool(spec.get("deletion_protection", False))
    ceiling = spec.get("max_hourly_cost_usd")
    row.max_hourly_cost_micros = int(Decimal(ceiling) * MICROS) if ceiling is not None else None
    row.node_repair = spec.get("node_repair") or "auto"
    row.capacity_type = spec.get("capacity_type") or "on_demand"
    if (row.ttl, row.expires_at) != (spec.get("ttl"), spec.get("expires_at")):
        row.expiry_blocked_at = None  # a new expiry: a later block is reported again
    row.ttl, row.expires_at = spec.get("ttl"), spec.get("expires_at")
    row.idle_teardown_minutes = spec.get("idle_teardown_minutes")
    grace = spec.get("scale_down_grace_minutes")
    row.scale_down_grace_minutes = DEFAULT_GRACE_MINUTES if grace is None else int(grace)
    autoscaling = spec.get("autoscaling") or {}
    row.autoscaling_min_nodes = autoscaling.get("min_nodes")
    row.autoscaling_max_nodes = autoscaling.get("max_nodes")
    row.autoscaling_idle_minutes = autoscaling.get("scale_down_idle_minutes")
    row.slurm_config = spec.get("slurm_config")
    row.container_images = dict(spec.get("container_images") or {})
    row.ssh_key_links = [
        ClusterSshKey(ssh_key_id=ref, position=i) for i, ref in enumerate(spec.get("ssh_key_ids") or [])
    ]
    row.volume_links = [
        ClusterVolume(volume_id=ref, position=i) for i, ref in enumerate(spec.get("volume_ids") or [])
    ]
    row.security_group_links = [
        ClusterSecurityGroup(security_group_id=ref, position=i)
        for i, ref in enumerate(spec.get("security_group_ids") or [])
    ]


def create_cluster(
    *,
    session: Session,
    catalog: Catalog,
    project_id: str,
    spec: Mapping[str, Any],
    scope: Scope | None = None,
) -> Cluster:
    """Accept a cluster spec (validated in full); the engine provisions it from PENDING. 402 when the
    project is out of prepaid credits or a block_new budget it falls under is spent; 403 when it would
    pass a project quota (`quota_exceeded`). A scoped caller's
    cluster carries its scope label."""
    now = utcnow()
    if spec.get("autoscaling") is not None and spec.get("node_count") is not None:
        raise validation_failed([_NODE_COUNT_WITH_AUTOSCALING])
    spec = {**spec, "labels": scoped_labels(spec.get("labels") or {}, scope),
            "slurm_config": _plain(spec.get("slurm_config"))}
    spec = {**spec, **lifetime_changes(spec, current=None, created_at=now, now=now)}
    credentials = spec.pop("registry_credentials", None) or {}
    if errors := container_images.check_credentials(credentials):
        raise validation_failed(errors)
    if spec.get("host_pool_id") is not None:  # region and instance type default to the pool's
        spec = pool_clusters.complete(session, catalog, project_id, spec, scope)
    full = _check_spec(session, catalog, project_id, spec, scope=scope)
    check_admission_allowed(session, project_id=project_id, what="creating a cluster",
                            charge_micros=_up_front_micros(full, catalog))
    check_budget_admission(session, project_id=project_id, labels=full.get("labels") or {}, now=now)
    quotas.admit(session=session, catalog=catalog, project_id=project_id, spec=full)
    row = Cluster(
        id=new_id("cluster"),
        project_id=project_id,
        status="PENDING",
        generation=1,
        created_at=now,
        updated_at=now,
    )
    _apply(row, full)
    container_images.store_credentials(row, credentials)
    session.add(row)
    session.flush()
    if not full.get("security_group_ids"):
        ensure_default_group(session=session, project_id=project_id)
    reserved_ips.assign(session, catalog, cluster=row, reserved_ip_id=full.get("reserved_ip_id"))
    request_reconcile(session, row.id, catalog=catalog)
    return row


def get_cluster(
    *,
    session: Session,
    project_id: str,
    cluster_id: str,
    for_update: bool = False,
    scope: Scope | None = None,
) -> Cluster:
    """One of the project's clusters (within the caller's scope) that is not yet destroyed after
    deletion; 404 otherwise."""
    row = get_owned(
        session,
        Cluster,
        kind="cluster",
        project_id=project_id,
        row_id=cluster_id,
        field="cluster_id",
        for_update=for_update,
        # One round trip for a read; FOR UPDATE cannot lock the nullable side of the outer joins.
        options=() if for_update else _LINKS_JOINED,
        scope=scope,
    )
    if row.deletion_requested_at is not None and row.status == DESTROYED:
        raise NotFound(f"cluster {cluster_id} was deleted", field="cluster_id")
    return row


def read_cluster(
    *, session: Session, project_id: str, cluster_id: str, scope: Scope | None = None
) -> tuple[Any, dict[str, Any]]:
    """`get_cluster` for a read-only caller: the cluster as a Core row (columns as attributes) and its
    declared spec; the same 404s."""
    if not is_id_of("cluster", cluster_id):
        raise NotFound(f"no cluster with id {cluster_id[:64]!r}", field="cluster_id")
    params = {"cluster_id": cluster_id}
    row = execute_core(session, _CLUSTER_ROW, params).one_or_none()
    if row is None or row.project_id != project_id or not in_scope(scope, row.labels):
        raise NotFound(f"no cluster with id {cluster_id!r}", field="cluster_id")
    if row.deletion_requested_at is not None and row.status == DESTROYED:
        raise NotFound(f"cluster {cluster_id} was deleted", field="cluster_id")
    links = sorted(execute_core(session, _CLUSTER_LINKS, params), key=lambda link: link.position)
    ssh_key_ids = [link.ref for link in links if link.kind == "ssh_key"]
    volume_ids = [link.ref for link in links if link.kind == "volume"]
    group_ids = [link.ref for link in links if link.kind == "security_group"]
    return row, spec_of(row, ssh_key_ids, volume_ids, group_ids)


def list_clusters(
    *,
    session: Session,
    project_id: str,
    after_id: str | None,
    limit: int,
    name: str | None = None,
    scope: Scope | None = None,
) -> tuple[Sequence[Cluster], bool]:
    """A page of the project's clusters within the scope (deleted and destroyed ones left out), oldest
    first."""
    query = owned_select(Cluster, project_id=project_id, scope=scope).where(
        or_(Cluster.deletion_requested_at.is_(None), Cluster.status != DESTROYED),
    )
    if name is not None:
        query = query.where(Cluster.name == name)
    return keyset_page(session, query, Cluster.id, after_id=after_id, limit=limit)


def _writable(
    session: Session, project_id: str, cluster_id: str, if_match: str | None, scope: Scope | None
) -> Cluster:
    row = get_cluster(
        session=session, project_id=project_id, cluster_id=cluster_id, for_update=True, scope=scope
    )
    check_if_match(if_match, row)
    if row.deletion_requested_at is not None:
        raise Conflict("the cluster is being deleted", field="cluster_id", code="cluster_deleting")
    return row


_NODE_COUNT_WITH_AUTOSCALING = FieldError(
    "node_count", "conflicts_with_autoscaling",
    "node_count and autoscaling cannot both be set: with autoscaling the engine sets node_count between "
    "autoscaling.min_nodes and autoscaling.max_nodes; remove node_count or autoscaling",
)


def _autoscaled_node_count(merged: dict[str, Any], changes: Mapping[str, Any],
                           current: Mapping[str, Any]) -> list[FieldError]:
    """An autoscaled cluster's node_count is the engine's: refuse a new one, and move it into a new range."""
    autoscaling = merged.get("autoscaling")
    if not isinstance(autoscaling, Mapping):
        return []
    if "node_count" in changes and changes["node_count"] != current["node_count"]:
        return [_NODE_COUNT_WITH_AUTOSCALING]
    low, high = autoscaling.get("min_nodes"), autoscaling.get("max_nodes")
    if isinstance(low, int) and isinstance(high, int) and low <= high:
        merged["node_count"] = min(max(int(merged["node_count"]), low), high)
    return []


def update_cluster(
    *,
    session: Session,
    catalog: Catalog,
    project_id: str,
    cluster_id: str,
    changes: Mapping[str, Any],
    if_match: str | None,
    remove_node_names: Sequence[str] = (),
    scope: Scope | None = None,
) -> Cluster:
    """Apply a partial update (absent fields keep their value); immutable fields may only repeat theirs;
    a scale-up of a project out of prepaid credits is refused (402), one past a project quota (403).

    `remove_node_names` picks the nodes a scale-down releases (default: idle first, then the newest;
    backend.provisioning.scale_down drains a busy one and waits scale_down_grace_minutes for its jobs).
    """
    row = _writable(session, project_id, cluster_id, if_match, scope)
    changes = dict(changes)
    credentials = changes.pop("registry_credentials", None)
    if errors := container_images.check_credentials(credentials):
        raise validation_failed(errors)
    if "labels" in changes:
        changes = {**changes, "labels": scoped_labels(changes["labels"] or {}, scope)}
    if "slurm_config" in changes:
        changes = {**changes, "slurm_config": _plain(changes["slurm_config"])}
    current = cluster_spec(row)
    errors = [
        FieldError(field, "immutable_field", f"{field} cannot change in place (create a new cluster)")
        for field in IMMUTABLE_FIELDS
        if field in changes and changes[field] != current[field]
    ]
    merged = {**current, **{k: v for k, v in changes.items() if k != "billing"}}
    errors += _autoscaled_node_count(merged, changes, current)
    merged.update(lifetime_changes(changes, current=current, created_at=row.created_at, now=utcnow()))
    if "billing" in changes:
        billing = {**current["billing"], **(changes["billing"] or {})}
        errors += [
            FieldError(f"billing.{f}", "immutable_field", f"billing.{f} cannot change in place")
            for f in IMMUTABLE_BILLING_FIELDS
            if billing.get(f) != current["billing"].get(f)
        ]
        merged["billing"] = billing
    if errors:
        raise validation_failed(errors)
    # A scale of a started reserved term: only the reserved nodes are at the reserved rate.
    reserved = reserved_node_count(session, row.id) if merged["billing"]["type"] == "reserved" else None
    full = _check_spec(
        session, catalog, project_id, merged, attached=current["volume_ids"], reserved_nodes=reserved,
        current=current, scope=scope,
    )
    grows = full["node_count"] > current["node_count"]
    if grows:
        charge = _up_front_micros(full, catalog, current=current, reserved_nodes=reserved)
        check_admission_allowed(session, project_id=project_id, what="scaling up", field="node_count",
                                charge_micros=charge)
        quotas.admit(session=session, catalog=catalog, project_id=project_id, spec=full, current=current)
    _check_blocked_budgets(session, project_id, full, current, grows=grows)
    if credentials is not None:
        container_images.store_credentials(row, credentials)
        touch(row)
    if full != current:
        reserved_ips.assign(session, catalog, cluster=row, reserved_ip_id=full.get("reserved_ip_id"))
        _apply(row, full)
        touch(row)
        session.flush()
        if not full.get("security_group_ids"):
            ensure_default_group(session=session, project_id=project_id)
        request_reconcile(session, row.id, remove_node_names=remove_node_names, catalog=catalog)
    if credentials is not None or "container_images" in changes:
        # New credentials, or the images declared again: an import that failed is tried once more.
        _retry_failed_images(session, row, reconciled=full != current)
    return row


def _retry_failed_images(session: Session, row: Cluster, *, reconciled: bool) -> None:
    if not reconciled:
        request_reconcile(session, row.id)  # first: it serialises with the engine's pass on the cluster
    state = session.get(EngineCluster, row.id)
    if state is not None and state.images_failed is not None:
        state.images_failed = None


def _up_front_micros(
    spec: Mapping[str, Any],
    catalog: Catalog,
    *,
    current: Mapping[str, Any] | None = None,
    reserved_nodes: int | None = None,
) -> int:
    """What admitting `spec` (in place of `current`) charges up front: a reserved term's up-front part,
    else the first billing slice (an hour) of the added cost; a prepaid balance must cover it."""
    try:
        new = estimate_cluster_cost(spec, catalog, reserved_node_count=reserved_nodes)
        old = None if current is None else estimate_cluster_cost(
            current, catalog, reserved_node_count=reserved_nodes
        )
    except PricingError:
        return 0  # _check_spec has refused a shape without a price already
    return first_charge_micros(new, old)


def _check_blocked_budgets(
    session: Session, project_id: str, full: Mapping[str, Any], current: Mapping[str, Any], *, grows: bool
) -> None:
    """block_new covers more than creates: a scale-up or an autoscaling minimum raise under a spent
    budget, and a relabel into a team whose budget is spent, would add spend where it is blocked."""
    labels, before = full.get("labels") or {}, current.get("labels") or {}
    low = (full.get("autoscaling") or {}).get("min_nodes")
    was = (current.get("autoscaling") or {}).get("min_nodes")
    if grows or (low is not None and was is not None and low > was):
        check_budget_admission(session, project_id=project_id, labels=labels, now=utcnow(),
                               what="scaling up and raising autoscaling.min_nodes are refused")
    if labels != before:
        check_budget_admission(session, project_id=project_id, labels=labels, now=utcnow(),
                               what="relabelling a cluster into it is refused", previous_labels=before)


def delete_cluster(
    *, session: Session, project_id: str, cluster_id: str, if_match: str | None, scope: Scope | None = None
) -> Cluster:
    """Request deletion (409 under deletion_protection); the engine tears the cluster down."""
    row = get_cluster(
        session=session, project_id=project_id, cluster_id=cluster_id, for_update=True, scope=scope
    )
    check_if_match(if_match, row)
    if row.deletion_requested_at is not None:
        return row
    if row.deletion_protection:
        raise Conflict(
            "deletion_protection is on; set it to false first",
            field="deletion_protection",
            code="deletion_protected",
        )
    row.deletion_requested_at = utcnow()
    touch(row)
    request_reconcile(session, row.id)
    return row


def attach_volume(
    *,
    session: Session,
    catalog: Catalog,
    project_id: str,
    cluster_id: str,
    volume_id: str,
    if_match: str | None,
    scope: Scope | None = None,
) -> Cluster:
    """Attach a volume of the cluster's region (no-op when already attached)."""
    row = _writable(session, project_id, cluster_id, if_match, scope)
    volume = get_owned(
        session, Volume, kind="volume", project_id=project_id, row_id=volume_id, field="volume_id",
        scope=scope,
    )
    current = cluster_spec(row)
    if volume.id in current["volume_ids"]:
        return row
    return update_cluster(
        session=session,
        catalog=catalog,
        project_id=project_id,
        cluster_id=cluster_id,
        changes={"volume_ids": [*current["volume_ids"], volume.id]},
        if_match=None,
        scope=scope,
    )


def detach_volume(
    *,
    session: Session,
    catalog: Catalog,
    project_id: str,
    cluster_id: str,
    volume_id: str,
    if_match: str | None,
    scope: Scope | None = None,
) -> Cluster:
    """Detach a volume (404 naming volume_id when it is not attached)."""
    row = _writable(session, project_id, cluster_id, if_match, scope)
    current = cluster_spec(row)
    if volume_id not in current["volume_ids"]:
        get_owned(
            session, Volume, kind="volume", project_id=project_id, row_id=volume_id, field="volume_id",
            scope=scope,
        )
        raise NotFound(
            f"volume {volume_id} is not attached to this cluster",
            field="volume_id",
            code="volume_not_attached",
        )
    return update_cluster(
        session=session,
        catalog=catalog,
        project_id=project_id,
        cluster_id=cluster_id,
        changes={"volume_ids": [v for v in current["volume_ids"] if v != volume_id]},
        if_match=None,
        scope=scope,
    )
