"""One driver for the engine: the configured one (`GPUCLOUD_DRIVER`), with the clusters on host pools handed
to the `ssh_hosts` driver. Every call names its cluster (an operation's request, a token that starts with a
node or cluster id, a day-2 read), so each goes to the driver of that cluster; what is not per cluster (the
spot market, the local driver's volume data) is the configured driver's.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from backend.provisioning.driver import (
    Job,
    LogRequest,
    NodeRun,
    NodeTelemetry,
    Operation,
    OperationRequest,
    Partition,
    PowerRequests,
    ProvisioningDriver,
    TelemetryTarget,
    logs_of,
    partitions_of,
    power_requests_of,
    telemetry_of,
    workload_of,
)
from backend.provisioning.drivers.ssh_hosts.driver import SshHostsDriver
from backend.store.engine_models import EngineNode
from backend.store.models import Cluster


class PoolRouting:
    def __init__(self, configured: ProvisioningDriver, own_hosts: SshHostsDriver) -> None:
        self.configured = configured
        self.own_hosts = own_hosts
        self.name = configured.name
        # The day-2 reads are offered whenever either driver offers them (each answers for its clusters).
        self.capabilities = dataclasses.replace(
            configured.capabilities, telemetry=True, workload=True, logs=True, partitions=True
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.configured, name)  # what only the configured driver has (spot market, volumes)

    def driver_for(self, session: Session, cluster_id: str | None) -> ProvisioningDriver:
        cluster = None if cluster_id is None else session.get(Cluster, cluster_id)
        return self.own_hosts if cluster is not None and cluster.host_pool_id is not None else self.configured

    def _for_token(self, session: Session, token: str) -> ProvisioningDriver:
        owner = token.split("/", 1)[0]
        node = session.get(EngineNode, owner)
        return self.driver_for(session, node.cluster_id if node is not None else owner)

    def submit(self, session: Session, request: OperationRequest, now: dt.datetime) -> Operation:
        return self.driver_for(session, request.cluster_id).submit(session, request, now)

    def get(self, session: Session, client_token: str) -> Operation | None:
        return self._for_token(session, client_token).get(session, client_token)

    def nodes_telemetry(
        self, session: Session, targets: Sequence[TelemetryTarget], now: dt.datetime
    ) -> list[NodeTelemetry]:
        """Each driver reads its clusters' nodes; the readings come back in the targets' order."""
        by_driver: dict[int, tuple[ProvisioningDriver, list[int]]] = {}
        for index, target in enumerate(targets):
            driver = self._for_token(session, target.instance_id)
            by_driver.setdefault(id(driver), (driver, []))[1].append(index)
        readings: dict[int, NodeTelemetry] = {}
        for driver, indexes in by_driver.values():
            source = telemetry_of(driver)
            if source is None:
                continue
            answered = source.nodes_telemetry(session, [targets[i] for i in indexes], now)
            readings.update(zip(indexes, answered, strict=True))
        return [readings[i] for i in range(len(targets)) if i in readings]

    def cluster_jobs(
        self,
        session: Session,
        cluster_name: str,
        nodes: Sequence[NodeRun],
        now: dt.datetime,
        *,
        cluster_id: str,
    ) -> list[Job]:
        source = workload_of(self.driver_for(session, cluster_id))
        return (
            []
            if source is None
            else source.cluster_jobs(session, cluster_name, nodes, now, cluster_id=cluster_id)
        )

    def cluster_partitions(
        self, session: Session, cluster_id: str, now: dt.datetime
    ) -> list[Partition] | None:
        source = partitions_of(self.driver_for(session, cluster_id))
        return None if source is None else source.cluster_partitions(session, cluster_id, now)

    def cluster_logs(self, session: Session, request: LogRequest, now: dt.datetime) -> list[str]:
        source = logs_of(self.driver_for(session, request.cluster_id))
        return [] if source is None else source.cluster_logs(session, request, now)

    def power_requests(
        self, session: Session, cluster_id: str, members: Sequence[str]
    ) -> PowerRequests | None:
        source = power_requests_of(self.driver_for(session, cluster_id))
        return None if source is None else source.power_requests(session, cluster_id, members)
