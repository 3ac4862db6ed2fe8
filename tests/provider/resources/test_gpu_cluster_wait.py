"""Cluster waits: what counts as converged after a change, what ends a wait (failed, held, timed out), and
how progress is logged."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from provider.client import GpuCloudClient
from provider.resources.cluster_wait import (
    ClusterFailed,
    ClusterStillConverging,
    Poller,
    engine_saw_change,
    failure_reason,
    is_converged,
    wait_until_running,
)


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


def test_gpu_cluster_wait_failure_reasons_name_the_failed_nodes():
    assert failure_reason(cluster()) is None
    assert failure_reason(cluster(status="PROVISIONING", phase="ProvisioningNodes", nodes=[])) is None
    rolled = cluster(status="FAILED", phase="RollingBack", status_reason="boot failed 3 times")
    assert failure_reason(rolled) == "status FAILED, phase RollingBack: boot failed 3 times"
    # A hardware fault: degraded is a failure too, named per node with the API's reason.
    bad = {"name": "c-1", "status": "FAILED", "status_reason": "hardware fault: XID 79", "network": {}}
    degraded = cluster(status="FAILED", phase="Degraded", node_count=2, nodes=[*cluster()["nodes"], bad])
    assert failure_reason(degraded) == "status FAILED, phase Degraded: node c-1: hardware fault: XID 79"
    explained = {**degraded, "status_reason": "node c-1: hardware fault: XID 79"}
    assert failure_reason(explained) == "status FAILED, phase Degraded: node c-1: hardware fault: XID 79"
    # A scale-up the engine rolled back: settled with fewer nodes than asked, and saying why.
    short = cluster(node_count=3, status_reason="scale-up rolled back: no replacement node is free")
    assert failure_reason(short) == "1 of 3 nodes running: scale-up rolled back: no replacement node is free"
    assert failure_reason(cluster(node_count=3)) is None  # still placing the new nodes


class Script:
    """A Poller over a scripted sequence of cluster objects, on a fake clock that moves when it sleeps."""

    def __init__(self, *bodies: dict[str, Any], timeout: float = 3600.0) -> None:
        self.bodies = list(bodies)
        self.now = 0.0
        api = httpx.MockTransport(self.answer)
        client = GpuCloudClient("http://api.test", "k", transport=api, max_retries=0)
        self.poller = Poller(client, "c", timeout, self.sleep, clock=lambda: self.now)
        self.polls = 0

    def answer(self, request: httpx.Request) -> httpx.Response:
        self.polls += 1
        body = self.bodies.pop(0) if len(self.bodies) > 1 else self.bodies[0]
        return httpx.Response(200, json={"id": "c", **body})

    def sleep(self, seconds: float) -> None:
        self.now += seconds


CHANGED_AT = "2026-11-26T01:00:05Z"
READY = [{"phase": "Ready", "at": "2026-11-26T01:00:00Z"}]


def test_gpu_cluster_wait_degraded_ends_at_once():
    bad = {"name": "c-0", "status": "FAILED", "status_reason": "XID 48", "network": {}}
    script = Script(cluster(status="PROVISIONING", phase="ProvisioningNodes", nodes=[]),
                    cluster(status="FAILED", phase="Degraded", nodes=[bad]))
    with pytest.raises(ClusterFailed, match="node c-0: XID 48") as failed:
        wait_until_running(script.poller)
    assert script.polls == 2 and failed.value.last is not None


def test_gpu_cluster_wait_node_repaired_in_place_is_waited_for_not_failed():
    # node_repair = "auto": a failed node while the cluster is Repairing is being replaced.
    bad = {"name": "c-0", "status": "FAILED", "status_reason": "XID 79", "network": {}}
    script = Script(cluster(status="RUNNING", phase="Repairing", nodes=[bad]), cluster())
    body = wait_until_running(script.poller)
    assert is_converged(body) and script.polls == 2


def test_gpu_cluster_wait_create_that_came_up_then_lost_a_kept_failed_node_is_done():
    # node_repair = "manual": Ready, then an XID fails c-1 and it stays failed while c-0 runs on. A create
    # wait accepts it (the cluster exists and runs); one that never came up still fails at once.
    ok = {"name": "c-0", "status": "RUNNING", "network": {}}
    bad = {"name": "c-1", "status": "FAILED", "status_reason": "XID 79", "network": {}}
    day_two = cluster(phase="Degraded", node_count=2, nodes=[ok, bad], phase_history=READY)
    body = wait_until_running(Script(day_two).poller, day_two_ok=True)
    assert body["phase"] == "Degraded"
    with pytest.raises(ClusterFailed, match="node c-1: XID 79"):
        wait_until_running(Script(day_two).poller)  # an update's wait: the change may not be carried out
    never_ready = cluster(phase="Degraded", node_count=2, nodes=[ok, bad], phase_history=[])
    with pytest.raises(ClusterFailed, match="node c-1: XID 79"):
        wait_until_running(Script(never_ready).poller, day_two_ok=True)


def test_gpu_cluster_wait_scale_down_ends_when_the_engine_settles_without_a_grace():
    # The API's answer to the PATCH already shows the node leaving; no phase is recorded for it.
    leaving = {"name": "c-1", "status": "DESTROYING", "network": None}
    answer = cluster(nodes=[*cluster()["nodes"], leaving], phase_history=READY)
    script = Script(answer, cluster(phase_history=READY))
    body = wait_until_running(script.poller, changed_at=CHANGED_AT, changed=answer)
    assert is_converged(body) and script.polls == 2 and script.now < 5


def test_gpu_cluster_wait_change_not_yet_picked_up_waits_for_the_engine():
    # A key change: the answer looks converged until the engine records Reconfiguring.
    answer = cluster(phase_history=READY)
    later = [*READY, {"phase": "Reconfiguring", "at": "2026-11-26T01:00:06Z"}]
    script = Script(answer, answer, cluster(phase="Reconfiguring", phase_history=later),
                    cluster(phase_history=[*later, {"phase": "Ready", "at": "2026-11-26T01:00:09Z"}]))
    wait_until_running(script.poller, changed_at=CHANGED_AT, changed=answer)
    assert script.polls == 4


def test_gpu_cluster_wait_held_or_timed_out_is_still_converging():
    paused = Script(cluster(status="PAUSED", phase="Paused", status_reason="credits exhausted"))
    with pytest.raises(ClusterStillConverging, match="credits exhausted"):
        wait_until_running(paused.poller)
    slow = Script(cluster(status="PROVISIONING", phase="ProvisioningNodes", nodes=[]), timeout=60)
    with pytest.raises(ClusterStillConverging, match="timed out"):
        wait_until_running(slow.poller)


def test_gpu_cluster_wait_logs_each_change_once_at_info(caplog):
    provisioning = cluster(status="PROVISIONING", phase="ProvisioningNodes", nodes=[])
    script = Script(provisioning, provisioning, provisioning, cluster(phase="StartingContainers"), cluster())
    with caplog.at_level(logging.INFO, logger="provider.resources.gpu_cluster"):
        wait_until_running(script.poller)
    lines = [r.getMessage() for r in caplog.records
             if r.levelno == logging.INFO and r.name == "provider.resources.gpu_cluster"]
    assert script.polls == 5 and len(lines) == 4, lines
    assert lines[0].startswith("gpu cluster c: PROVISIONING, phase ProvisioningNodes, 0/1 nodes running")
    assert "RUNNING, phase Ready, 1/1 nodes running" in lines[2]
    assert lines[3].startswith("gpu cluster c: converged in ")
    http_lines = [r for r in caplog.records if r.name == "provider.client" and r.levelno >= logging.INFO]
    assert http_lines == []  # requests are logged at DEBUG only
