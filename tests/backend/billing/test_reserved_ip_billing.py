"""Reserved IPs are billed per hour from reservation to release, at the lower rate while attached: the
worked example of docs/billing.md played through the real metering job (its numbers must appear in the
guide), passes between the changes included."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from pathlib import Path

from backend.domain.clock import ensure_utc
from backend.domain.ids import new_id
from backend.store.models import ReservedIp
from backend.store.reserved_ip_history import (
    ATTACHED,
    DETACHED,
    RELEASED,
    RESERVED,
    record_reserved_ip_event,
)
from tests.backend.billing.conftest import BillingWorld, at

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "billing.md"
EXPECTED = {
    "reserved_before": Decimal("0.005"),
    "attached": Decimal("0.01625"),
    "reserved_after": Decimal("0.0075"),
    "total": Decimal("0.02875"),
}


def _event(world: BillingWorld, ip_id: str, event: str, moment: datetime) -> None:
    with world.sessions.begin() as session:
        row = session.get(ReservedIp, ip_id)
        assert row is not None
        record_reserved_ip_event(session, reserved_ip=row, event=event, at=moment, cluster_id="cls_train")
        if event == RELEASED:
            session.delete(row)


def test_reserved_ip_worked_example_is_charged_at_both_rates(world: BillingWorld) -> None:
    project = world.project()
    with world.sessions.begin() as session:
        row = ReservedIp(id=new_id("reserved_ip"), project_id=project, name="edge", region="us-east-1",
                         address="198.18.0.9", labels={}, generation=1, created_at=at("09:00:00"),
                         updated_at=at("09:00:00"))
        session.add(row)
        session.flush()
        record_reserved_ip_event(session, reserved_ip=row, event=RESERVED, at=at("09:00:00"))
    ip = row.id
    world.run(at("09:30:00"))
    _event(world, ip, ATTACHED, at("10:00:00"))
    world.run(at("13:00:00"))
    _event(world, ip, DETACHED, at("16:30:00"))
    world.run(at("17:00:00"))
    _event(world, ip, RELEASED, at("18:00:00"))
    for hour in ("18:30:00", "19:00:00"):  # reruns charge nothing twice
        world.run(at(hour))

    records = world.records_of(ip)
    by_rate: dict[Decimal, Decimal] = {}
    for record in records:
        by_rate[record.unit_price_usd] = by_rate.get(record.unit_price_usd, Decimal(0)) + record.seconds
    assert by_rate == {Decimal("0.005"): Decimal(2.5 * 3600), Decimal("0.0025"): Decimal(6.5 * 3600)}
    attached = sum(r.amount_micros for r in records if r.unit_price_usd == Decimal("0.0025"))
    assert Decimal(attached) / 1_000_000 == EXPECTED["attached"]
    before = sum(r.amount_micros for r in records if ensure_utc(r.period_end) <= at("10:00:00"))
    assert Decimal(before) / 1_000_000 == EXPECTED["reserved_before"]
    assert world.charged(project, kind="reserved_ip") == EXPECTED["total"]
    stretches = EXPECTED["reserved_before"] + EXPECTED["attached"] + EXPECTED["reserved_after"]
    assert stretches == EXPECTED["total"]
    assert len({r.idempotency_key for r in records}) == len(records)
    text = GUIDE.read_text(encoding="utf-8")
    for name, value in EXPECTED.items():
        assert str(value) in text, f"docs/billing.md does not show {name} = {value}"
