"""Storage across cluster lifetimes, on-demand scaling, and crashes in the middle of a charge."""

from __future__ import annotations

from decimal import Decimal

import pytest

import backend.billing.ledger as ledger
from backend.store.billing_models import LedgerEntry
from tests.backend.billing.conftest import BillingWorld, at


def test_storage_is_billed_for_the_volume_life_across_cluster_lifetimes(world: BillingWorld) -> None:
    project = world.project()
    volume = world.volume(project, region="us-east-1", size_tib=4, created=at("09:00:00"))
    first = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=1)
    world.transition(first, "n0", "RUNNING", at("10:00:00"))
    world.transition(first, "n0", "DESTROYING", at("11:00:00"))  # first cluster gone; the volume stays
    world.run(at("12:00:00"))
    world.resize_volume(volume, 6, at("13:30:00"))
    second = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=1)
    world.transition(second, "n0", "RUNNING", at("14:00:00"))
    world.transition(second, "n0", "DESTROYING", at("15:00:00"))
    world.run(at("16:00:00"))
    world.delete_volume(volume, at("18:00:00"))
    world.run(at("19:00:00"))
    world.run(at("20:00:00"))
    # 4 TiB 09:00-13:30 (4.5 h) then 6 TiB 13:30-18:00 (4.5 h) at 0.1122 per TiB-hour.
    tib_hours = 4 * Decimal("4.5") + 6 * Decimal("4.5")
    assert world.charged(project, kind="storage") == Decimal("0.1122") * tib_hours
    assert world.charged(project, kind="compute_on_demand") == 2 * Decimal("31.92")


def test_on_demand_scaling_changes_the_rate_from_that_moment(world: BillingWorld) -> None:
    project = world.project()
    cluster = world.cluster(project, instance_type="8xB200", region="us-west-2", node_count=2)
    world.nodes(cluster, ["n0", "n1"], "RUNNING", at("10:00:00"))
    world.set_node_count(cluster, 4)
    world.nodes(cluster, ["n2", "n3"], "RUNNING", at("10:30:00"))
    world.set_node_count(cluster, 1)
    world.nodes(cluster, ["n1", "n2", "n3"], "DESTROYING", at("10:45:00"))
    world.run(at("11:01:00"))
    # 8 GPUs x 8.50 = 68 per node-hour: n0 1 h, n1 45 min, n2 and n3 15 min each.
    assert world.charged(project) == Decimal("68") * (1 + Decimal("0.75") + 2 * Decimal("0.25"))


def test_a_crash_in_the_middle_of_a_charge_charges_nothing_and_the_next_run_charges_once(
    world: BillingWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = world.project()
    world.grant(project, "1000.00", moment=at("09:00:00"))
    cluster = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=2)
    world.nodes(cluster, ["n0", "n1"], "RUNNING", at("10:00:00"))

    real_entry = LedgerEntry
    debits = 0

    def crash_on_third_debit(**kwargs: object) -> LedgerEntry:
        nonlocal debits
        debits += 1
        if debits == 3:  # the usage record of the third charge is already flushed
            raise RuntimeError("worker killed mid-charge")
        return real_entry(**kwargs)

    monkeypatch.setattr(ledger, "LedgerEntry", crash_on_third_debit)
    with pytest.raises(RuntimeError, match="mid-charge"):
        world.run(at("13:01:00"))
    monkeypatch.setattr(ledger, "LedgerEntry", real_entry)  # the worker restarts
    assert world.records(project) == []  # the whole pass rolled back: nothing half-charged
    assert world.balance(project) == Decimal("1000.00")

    result = world.run(at("13:01:30"))
    assert result.records_charged == 6  # 2 nodes x 3 hours, none skipped
    assert world.balance(project) == Decimal("1000.00") - 6 * Decimal("31.92")
    assert world.run(at("13:02:00")).records_charged == 0  # and none twice


def test_a_key_charged_by_a_concurrent_pass_after_our_check_is_skipped_not_doubled(
    world: BillingWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = world.project()
    world.grant(project, "100.00", moment=at("09:00:00"))
    cluster = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=1)
    world.transition(cluster, "n0", "RUNNING", at("10:00:00"))
    world.run(at("11:01:00"))
    # Another worker stored the slice between our existence check and our insert: the check sees
    # nothing, the insert hits the unique key, the savepoint skips it and the pass goes on.
    monkeypatch.setattr(ledger, "existing_keys", lambda *_args, **_kwargs: set())
    assert world.run(at("11:01:30")).records_charged == 0
    assert world.charged(project) == Decimal("31.92")
    assert world.balance(project) == Decimal("100.00") - Decimal("31.92")


def test_a_volume_resized_in_the_second_it_was_first_metered_keeps_one_segment(world: BillingWorld) -> None:
    project = world.project()
    volume = world.volume(project, region="us-east-1", size_tib=1, created=at("10:00:00"))
    world.run(at("10:00:30"))
    world.resize_volume(volume, 3, at("10:00:00"))
    world.run(at("10:00:40"))
    world.run(at("12:01:00"))
    assert world.charged(project, kind="storage") == Decimal("0.1122") * 3 * 2


def test_two_passes_at_once_never_charge_a_key_twice(world: BillingWorld) -> None:
    import threading

    projects = [world.project(f"p{i}") for i in range(3)]
    for project in projects:
        world.grant(project, "1000.00", moment=at("09:00:00"))
        cluster = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=2)
        world.nodes(cluster, ["n0", "n1"], "RUNNING", at("10:00:00"))
        world.volume(project, region="us-east-1", size_tib=5, created=at("10:00:00"))
    errors: list[BaseException] = []

    def one_pass() -> None:
        try:
            world.run(at("14:01:00"))
        except BaseException as error:  # collected: the assertion below shows it
            errors.append(error)

    threads = [threading.Thread(target=one_pass) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    world.run(at("14:01:00"))  # a pass that lost a race is simply redone
    assert all("IntegrityError" in type(e).__name__ or "Serialization" in type(e).__name__ for e in errors)
    for project in projects:
        keys = [r.idempotency_key for r in world.records(project)]
        assert len(keys) == len(set(keys)) == 2 * 4 + 4  # 2 nodes x 4 h + 4 storage slices
        expected = Decimal("1000.00") - 8 * Decimal("31.92") - 4 * 5 * Decimal("0.1122")
        assert world.balance(project) == expected
