"""The provisioning engine's entry points the services call (names fixed by the backend contracts)."""

from __future__ import annotations

from backend.provisioning.engine import request_reconcile
from backend.provisioning.views import cluster_runtime

__all__ = ["cluster_runtime", "request_reconcile"]
