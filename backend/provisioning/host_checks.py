"""The engine worker's checks of host pools' servers: claim the hosts due, check each over SSH, record the
verdict.

A claim is a lease on the host's row (owner and expiry, like an engine work item), taken in a short write
transaction; the check itself (seconds of SSH) runs outside any transaction, and its verdict is written only
if the row still has the claim and the generation it was made for (a PATCH that changed the key or the
hosts in between wins). A worker killed mid-check leaves a lease that expires: the next worker checks the
host again. Each host is checked again `host_check_interval_seconds` after its last check.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import structlog
from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.clock import Clock
from backend.provisioning import pool_hosts
from backend.provisioning.drivers.ssh_hosts.host_check import HostTarget, HostVerdict, check_host
from backend.store.db import write_session
from backend.store.host_pool_models import HostPool, HostPoolHost

log = structlog.get_logger(__name__)
# A claim lasts this long unless its worker's heartbeat extends it (`extend_leases`): a worker killed
# mid-check leaves hosts that another worker checks a minute later, however long a check may take.
LEASE_SECONDS = 60.0
BATCH = 16


@dataclass(frozen=True)
class Claim:
    host_id: int
    generation: int
    target: HostTarget
    pool_id: str


def claim_due(sessions: sessionmaker[Session], clock: Clock, owner: str, limit: int = BATCH) -> list[Claim]:
    """Lease up to `limit` hosts whose check is due, with what checking them needs."""
    now = clock.now()
    with write_session(sessions) as session:
        query = (
            select(HostPoolHost)
            .where(
                HostPoolHost.probe_due_at <= now,
                or_(HostPoolHost.probe_lease_expires_at.is_(None), HostPoolHost.probe_lease_expires_at < now),
            )
            .order_by(HostPoolHost.probe_due_at)
            .limit(limit)
        )
        if session.get_bind().dialect.name == "postgresql":
            query = query.with_for_update(skip_locked=True)
        claims = []
        for host in session.scalars(query):
            pool = session.get(HostPool, host.pool_id)
            if pool is None:
                continue
            host.probe_lease_owner = owner
            host.probe_lease_expires_at = now + dt.timedelta(seconds=LEASE_SECONDS)
            claims.append(Claim(host.id, host.probe_generation, _target(pool, host), pool.id))
        session.commit()
    return claims


def extend_leases(session: Session, owner: str, now: dt.datetime) -> None:
    """Keep the claims of a live worker (its heartbeat calls this in its own transaction)."""
    session.execute(update(HostPoolHost).where(HostPoolHost.probe_lease_owner == owner)
                    .values(probe_lease_expires_at=now + dt.timedelta(seconds=LEASE_SECONDS)))


def _target(pool: HostPool, host: HostPoolHost) -> HostTarget:
    return HostTarget(
        address=host.address,
        port=host.port or pool.ssh_port,
        user=pool.ssh_user,
        private_key=pool.ssh_private_key,
        host_key=host.host_key,
        jump=pool_hosts.bastion(pool),
        jump_known_hosts=host.jump_known_hosts or "",
        install_packages=pool.install_packages,
    )


def record(
    sessions: sessionmaker[Session],
    clock: Clock,
    owner: str,
    claim: Claim,
    verdict: HostVerdict,
    interval: dt.timedelta,
) -> bool:
    """Write a verdict if the claim still holds; whether it was written."""
    now = clock.now()
    with write_session(sessions) as session:
        host = session.get(HostPoolHost, claim.host_id, with_for_update=True)
        if host is None or host.probe_lease_owner != owner or host.probe_generation != claim.generation:
            session.rollback()
            return False
        host.status, host.reason_code, host.reason = verdict.status, verdict.reason_code, verdict.reason
        host.host_key = verdict.host_key
        host.jump_known_hosts = verdict.jump_known_hosts or host.jump_known_hosts
        host.inventory = verdict.inventory if verdict.inventory is not None else host.inventory
        host.checked_at = now
        host.probe_due_at = now + interval
        host.probe_lease_owner = host.probe_lease_expires_at = None
        session.commit()
    log.info(
        "host_pool.host_checked",
        pool_id=claim.pool_id,
        address=claim.target.address,
        status=verdict.status,
        reason_code=verdict.reason_code,
    )
    return True


def run_due_checks(
    sessions: sessionmaker[Session],
    clock: Clock,
    owner: str,
    interval: dt.timedelta,
    check: Callable[[HostTarget], HostVerdict] = check_host,
) -> int:
    """One round: claim the due hosts, check them in parallel, record the verdicts; how many were recorded."""
    claims = claim_due(sessions, clock, owner)
    if not claims:
        return 0
    with ThreadPoolExecutor(max_workers=min(8, len(claims)), thread_name_prefix="host-check") as pool:
        verdicts = list(pool.map(lambda claim: _safe_check(check, claim), claims))
    return sum(
        record(sessions, clock, owner, claim, verdict, interval)
        for claim, verdict in zip(claims, verdicts, strict=True)
    )


def _safe_check(check: Callable[[HostTarget], HostVerdict], claim: Claim) -> HostVerdict:
    try:
        return check(claim.target)
    except Exception as exc:  # one host's surprise must not stop the others' checks
        log.exception("host_pool.check_failed", pool_id=claim.pool_id, address=claim.target.address)
        reason = f"checking {claim.target.address} failed: {exc}"[:300]
        return HostVerdict("unreachable", "agent_failed", reason)
