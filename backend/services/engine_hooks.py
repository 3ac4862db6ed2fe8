"""The provisioning engine's entry points as the core calls them (names fixed by the backend contracts)."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from sqlalchemy.orm import Session


def _engine_module(name: str) -> Any | None:
    # TODO(engine): import directly once backend.provisioning.{engine,views,worker} exist.
    if (
        importlib.util.find_spec("backend.provisioning") is None
        or importlib.util.find_spec(f"backend.provisioning.{name}") is None
    ):
        return None
    return importlib.import_module(f"backend.provisioning.{name}")


def engine_available() -> bool:
    """True once the engine package provides its reconcile hook."""
    return _engine_module("engine") is not None


def request_reconcile(session: Session, cluster_id: str) -> None:
    """Ask the engine to converge `cluster_id`, inside the caller's transaction."""
    module = _engine_module("engine")
    if module is not None:
        module.request_reconcile(session, cluster_id)


def cluster_runtime(session: Session, cluster_id: str) -> dict[str, Any]:
    """Runtime fields of a cluster (nodes, login, slurm, kubernetes, nccl_env, phase_history)."""
    module = _engine_module("views")
    if module is None:
        return {}
    runtime: dict[str, Any] = module.cluster_runtime(session, cluster_id)
    return runtime
