"""The provisioning engine's entry points the services call (names fixed by the backend contracts)."""

from __future__ import annotations

from backend.provisioning.engine import pause_cluster, request_reconcile, resume_cluster
from backend.provisioning.views import cluster_runtime

__all__ = ["cluster_runtime", "pause_cluster", "request_reconcile", "resume_cluster"]
