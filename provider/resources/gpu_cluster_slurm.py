"""`slurm_config` of `gpucloud_gpu_cluster`: the Slurm configuration the user declares (partitions beside
`gpu`, QoS, prolog / epilog on a shared volume), its schema, its plan-time checks and its state.

The attributes' own checks (names, ranges, the script path's form) come from the API's contract
(`api_rules.json`); the rules between them are the API's `services.clusters.check_slurm_config`, checked
here at plan time with the same codes' meaning and blaming the same attribute.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provider.cty import is_unknown
from provider.framework import (
    BoolAttribute,
    Context,
    Int64Attribute,
    ListNestedAttribute,
    StringAttribute,
    root,
)
from provider.framework.schema import Attribute
from provider.framework.validators import Validator
from provider.resources.api_rules import field_validators

GENERATED_PARTITION, GENERATED_QOS = "gpu", "normal"
DEFAULT_MAX_TIME_MINUTES, DEFAULT_TIME_MINUTES = 7 * 24 * 60, 60
SCRIPT_ROOT = "/mnt/shared/"
NAME_RULE = "must be 1-32 lowercase letters, digits, '_' or '-', starting with a letter"
SCRIPT_RULE = "must be a path on an attached shared volume: /mnt/shared/<volume id>/<path>"


def _api(field: str, **text: str) -> list[Validator]:
    return field_validators("ClusterCreate", f"slurm_config.{field}", text=text)


PARTITION_ATTRIBUTES: dict[str, Attribute] = {
    "name": StringAttribute(
        required=True, description="Partition name (not `gpu`, the generated one; unique).",
        validators=_api("partitions[].name", pattern=NAME_RULE),
    ),
    "max_time_minutes": Int64Attribute(
        optional=True, computed=True, default=DEFAULT_MAX_TIME_MINUTES,
        description=f"Longest time limit of a job, `MaxTime` (default {DEFAULT_MAX_TIME_MINUTES}: 7 days).",
        validators=_api("partitions[].max_time_minutes"),
    ),
    "default_time_minutes": Int64Attribute(
        optional=True, computed=True, default=DEFAULT_TIME_MINUTES,
        description="Time limit of a job that asks for none, `DefaultTime` (default "
        f"{DEFAULT_TIME_MINUTES}); at most `max_time_minutes`.",
        validators=_api("partitions[].default_time_minutes"),
    ),
    "default": BoolAttribute(
        optional=True, computed=True, default=False,
        description="The default partition in place of `gpu` (one partition at most).",
    ),
}

QOS_ATTRIBUTES: dict[str, Attribute] = {
    "name": StringAttribute(
        required=True, description="QoS name (not `normal`, which every cluster has; unique).",
        validators=_api("qos[].name", pattern=NAME_RULE),
    ),
    "priority": Int64Attribute(
        optional=True, computed=True, default=0,
        description="Priority of the QoS' jobs (weighted by `PriorityWeightQOS`; default 0).",
        validators=_api("qos[].priority"),
    ),
    "max_wall_minutes": Int64Attribute(
        optional=True, description="Longest wall time of a job under the QoS, `MaxWall` (unset: none).",
        validators=_api("qos[].max_wall_minutes"),
    ),
}

SLURM_CONFIG_ATTRIBUTES: dict[str, Attribute] = {
    "partitions": ListNestedAttribute(
        optional=True, attributes=PARTITION_ATTRIBUTES,
        description="Partitions beside `gpu` (up to 16), each with every node of the cluster and the "
        "same per-GPU defaults.",
        validators=_api("partitions"),
    ),
    "qos": ListNestedAttribute(
        optional=True, attributes=QOS_ATTRIBUTES,
        description="QoS beside `normal` (up to 16), made with `sacctmgr` on the controller and allowed to "
        "the cluster's user (`sbatch --qos=<name>`).",
        validators=_api("qos"),
    ),
    "prolog": StringAttribute(
        optional=True,
        description="`Prolog=` of slurm.conf: an executable on a volume in `shared_volume_ids`, "
        "`/mnt/shared/<volume id>/<path>`, run as root by slurmd on a job's nodes before it starts.",
        validators=_api("prolog", pattern=SCRIPT_RULE),
    ),
    "epilog": StringAttribute(
        optional=True,
        description="`Epilog=` of slurm.conf: like `prolog`, run after each job.",
        validators=_api("epilog", pattern=SCRIPT_RULE),
    ),
}

SLURM_CONFIG_DESCRIPTION = (
    "Slurm clusters: the Slurm configuration you declare, beside the generated one (the `gpu` partition, "
    "the `normal` QoS). Partitions are written into slurm.conf, QoS made in the controller's accounting "
    "database, `prolog` / `epilog` written as `Prolog=` / `Epilog=`. Changes in place: slurm.conf is "
    "rewritten and `scontrol reconfigure` applies it (slurmctld keeps running, and so do jobs), then "
    "the QoS are set with `sacctmgr`; a QoS no longer declared is deleted. See "
    "[engine.md](../engine.md#slurm-configuration). The computed `slurm.partitions` lists `gpu` and these."
)


def check_slurm_config(ctx: Context, config: Mapping[str, Any], orchestrator: Any) -> None:
    """The API's rules between `slurm_config`'s fields, at plan time (values still unknown are skipped)."""
    block = config.get("slurm_config")
    if block is None or is_unknown(block):
        return
    path = root("slurm_config")
    if orchestrator is not None and not is_unknown(orchestrator) and orchestrator != "slurm":
        ctx.error("Slurm Configuration Needs Slurm",
                  f"slurm_config configures Slurm: it needs orchestrator = \"slurm\" (this cluster has "
                  f"\"{orchestrator}\"). Remove slurm_config or set orchestrator = \"slurm\".", path)
        return
    for kind, reserved in (("partitions", GENERATED_PARTITION), ("qos", GENERATED_QOS)):
        items = block.get(kind)
        if items is None or is_unknown(items):
            continue
        seen: set[str] = set()
        for index, item in enumerate(items):
            name = item.get("name") if isinstance(item, Mapping) else None
            if not isinstance(name, str):
                continue
            at = path.attr(kind).element(index).attr("name")
            if name == reserved:
                ctx.error("Reserved Slurm Name", f"{name} is generated for every Slurm cluster; choose "
                          f"another name for slurm_config.{kind}[{index}].", at)
            elif name in seen:
                ctx.error("Duplicate Slurm Name", f"{name} is declared twice in slurm_config.{kind}.", at)
            seen.add(name)
    partitions = block.get("partitions")
    if partitions is not None and not is_unknown(partitions):
        _check_partitions(ctx, [p if isinstance(p, Mapping) else {} for p in partitions])
    volumes = config.get("shared_volume_ids")
    for key in ("prolog", "epilog"):
        script = block.get(key)
        if not isinstance(script, str) or is_unknown(volumes):
            continue
        parts = script.split("/")
        at = path.attr(key)
        if any(part in (".", "..") for part in parts[4:]):
            ctx.error("Invalid Script Path", f"slurm_config.{key} {script} must not contain '.' or '..' "
                      "segments.", at)
            continue
        if volumes is not None and any(is_unknown(v) for v in volumes):
            continue
        if len(parts) < 5 or parts[3] not in (volumes or []):
            attached = ", ".join(f"{SCRIPT_ROOT}{v}" for v in sorted(volumes or [])) or "none"
            ctx.error("Script Not On An Attached Volume",
                      f"slurm_config.{key} {script} is not on a shared volume attached to the cluster "
                      f"(attached: {attached}). Add the volume to shared_volume_ids.", at)


def _check_partitions(ctx: Context, partitions: list[Mapping[str, Any]]) -> None:
    path = root("slurm_config").attr("partitions")
    for index, part in enumerate(partitions):
        default, limit = part.get("default_time_minutes"), part.get("max_time_minutes")
        default = DEFAULT_TIME_MINUTES if default is None else default
        limit = DEFAULT_MAX_TIME_MINUTES if limit is None else limit
        if not is_unknown(default) and not is_unknown(limit) and int(default) > int(limit):
            ctx.error("Default Time Above Maximum",
                      f"slurm_config.partitions[{index}].default_time_minutes ({default}) must be at most "
                      f"max_time_minutes ({limit}).", path.element(index).attr("default_time_minutes"))
    defaults = [i for i, part in enumerate(partitions) if part.get("default") is True]
    for index in defaults[1:]:
        ctx.error("More Than One Default Partition",
                  f"Only one partition may be the default; slurm_config.partitions[{defaults[0]}] "
                  f"({partitions[defaults[0]].get('name')}) already is.", path.element(index).attr("default"))


def _empty_as_null(prior: Any, value: list[Any]) -> Any:
    return None if not value and (prior is None or is_unknown(prior)) else value


def slurm_config_state(body: Any, prior: Any) -> dict[str, Any] | None:
    """`slurm_config` as the API returns it, with empty lists null where the configuration left them out."""
    if not isinstance(body, Mapping):
        return None
    before = prior if isinstance(prior, Mapping) else {}
    partitions = [
        {"name": p.get("name"), "max_time_minutes": p.get("max_time_minutes"),
         "default_time_minutes": p.get("default_time_minutes"), "default": bool(p.get("default"))}
        for p in body.get("partitions") or []
    ]
    qos = [
        {"name": q.get("name"), "priority": q.get("priority"), "max_wall_minutes": q.get("max_wall_minutes")}
        for q in body.get("qos") or []
    ]
    return {
        "partitions": _empty_as_null(before.get("partitions"), partitions),
        "qos": _empty_as_null(before.get("qos"), qos),
        "prolog": body.get("prolog"),
        "epilog": body.get("epilog"),
    }


def slurm_config_spec(value: Any) -> dict[str, Any] | None:
    """The API's `slurm_config` from the planned value (nulls left to the API's defaults)."""
    if not isinstance(value, Mapping):
        return None
    spec: dict[str, Any] = {}
    for key in ("partitions", "qos"):
        items = value.get(key)
        if items:
            spec[key] = [{k: v for k, v in item.items() if v is not None} for item in items]
    for key in ("prolog", "epilog"):
        if value.get(key) is not None:
            spec[key] = value[key]
    return spec
