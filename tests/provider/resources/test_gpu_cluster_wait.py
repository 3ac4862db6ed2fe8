"""Convergence rules of the cluster waits: what counts as converged after a change."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from provider.resources.cluster_wait import engine_saw_change, failure_reason, is_converged


def cluster(**values: Any) -> dict[str, Any]:
    node = {"name": "c-0", "status": "RUNNING", "network": {"fabric": "ib"}}
    return {"status": "RUNNING", "phase": "Ready", "node_count": 1, "nodes": [node], **values}


def test_gpu_cluster_wait_converged_needs_every_member_running_and_none_leaving():
    assert is_converged(cluster())
    assert not is_converged(cluster(node_count=2))  # scale-up not placed yet
    leaving = {"name": "c-1", "status": "DESTROYING", "network": None}
    assert not is_converged(cluster(nodes=[*cluster()["nodes"], leaving]))  # scale-down still releasing
    assert not is_converged(cluster(phase="Reconfiguring"))
    assert not is_converged(cluster(nodes=[{"name": "c-0", "status": "CONFIGURING", "network": {}}]))


def test_gpu_cluster_wait_engine_saw_change_compares_server_times():
    since = datetime(2026, 11, 26, 1, 0, 5, tzinfo=UTC)
    old = {"phase_history": [{"phase": "Ready", "at": "2026-11-26T01:00:04Z"}]}
    change = {"phase": "Reconfiguring", "at": "2026-11-26T01:00:05.5Z"}
    new = {"phase_history": [*old["phase_history"], change]}
    assert not engine_saw_change(old, since)
    assert engine_saw_change(new, since)
    naive = {"phase_history": [{"phase": "Scaling", "at": "2026-11-26T01:00:06"}]}  # SQLite: naive UTC
    assert engine_saw_change(naive, since)


def test_gpu_cluster_wait_failure_reasons():
    assert failure_reason(cluster()) is None
    assert failure_reason(cluster(status="FAILED", phase="Degraded")) is None  # the engine replaces nodes
    rolled = cluster(status="FAILED", phase="RollingBack", status_reason="boot failed 3 times")
    assert failure_reason(rolled) == "boot failed 3 times"
