from datetime import UTC, datetime, timedelta
from decimal import Decimal

from backend.billing.meter import (
    ComputeSegment,
    NodeTransition,
    RunningInterval,
    UsageKind,
    compute_segments,
    compute_usage_items,
    first_time_running,
    hour_slices,
    reservation_charge,
    running_intervals,
    storage_usage_items,
)

OD = UsageKind.COMPUTE_ON_DEMAND
RES = UsageKind.COMPUTE_RESERVED


def at(hhmmss: str, day: int = 2) -> datetime:
    h, m, s = (int(x) for x in hhmmss.split(":"))
    return datetime(2026, 3, day, h, m, s, tzinfo=UTC)


def test_running_intervals_start_at_running_and_stop_at_destroying_or_pause() -> None:
    transitions = [
        NodeTransition("n0", "PENDING", at("09:50:00")),
        NodeTransition("n0", "PROVISIONING", at("09:51:00")),
        NodeTransition("n0", "RUNNING", at("10:00:00")),
        NodeTransition("n0", "CONFIGURING", at("10:30:00")),  # volume attach: still metered
        NodeTransition("n0", "RUNNING", at("10:31:00")),
        NodeTransition("n0", "PAUSED", at("11:00:00")),
        NodeTransition("n0", "RUNNING", at("12:00:00")),
        NodeTransition("n0", "DESTROYING", at("12:20:15")),
        NodeTransition("n0", "DESTROYED", at("12:25:00")),
        NodeTransition("n1", "RUNNING", datetime(2026, 3, 2, 10, 0, 0, 500_000, tzinfo=UTC)),
    ]
    assert running_intervals(transitions) == [
        RunningInterval("n0", at("10:00:00"), at("11:00:00")),
        RunningInterval("n1", at("10:00:00"), None),
        RunningInterval("n0", at("12:00:00"), at("12:20:15")),
    ]


def test_running_intervals_truncate_to_the_second_and_ignore_unordered_input() -> None:
    transitions = [
        NodeTransition("n0", "DESTROYING", datetime(2026, 3, 2, 11, 0, 0, 999_999, tzinfo=UTC)),
        NodeTransition("n0", "RUNNING", datetime(2026, 3, 2, 10, 0, 0, 700_000, tzinfo=UTC)),
    ]
    assert running_intervals(transitions) == [RunningInterval("n0", at("10:00:00"), at("11:00:00"))]


def test_a_node_that_fails_before_running_is_never_metered() -> None:
    transitions = [
        NodeTransition("n0", "PROVISIONING", at("10:00:00")),
        NodeTransition("n0", "FAILED", at("10:05:00")),
    ]
    assert running_intervals(transitions) == []


def test_hour_slices_only_final_ones() -> None:
    assert hour_slices(at("10:20:00"), None, at("12:10:00")) == [
        (at("10:20:00"), at("11:00:00")),
        (at("11:00:00"), at("12:00:00")),
    ]
    assert hour_slices(at("10:20:00"), at("11:30:00"), at("11:29:59")) == [(at("10:20:00"), at("11:00:00"))]
    assert hour_slices(at("10:20:00"), at("11:30:00"), at("13:00:00")) == [
        (at("10:20:00"), at("11:00:00")),
        (at("11:00:00"), at("11:30:00")),
    ]
    assert hour_slices(at("10:20:00"), at("10:20:00"), at("13:00:00")) == []


def test_on_demand_scaling_changes_the_rate_from_that_moment() -> None:
    intervals = [
        RunningInterval("n0", at("10:00:00"), at("12:20:15")),
        RunningInterval("n1", at("10:00:00"), at("12:20:15")),
        RunningInterval("n2", at("11:42:30"), at("12:20:15")),
    ]
    items = compute_usage_items(
        compute_segments(intervals),
        gpus_per_node=8,
        on_demand_gpu_hour_usd=Decimal("3.99"),
        cutoff=at("13:00:00"),
    )
    by_node: dict[str, int] = {}
    for item in items:
        by_node[item.resource_id] = by_node.get(item.resource_id, 0) + item.amount_micros
    assert by_node == {"n0": 74_613_000, "n1": 74_613_000, "n2": 20_083_000}
    n2 = [i for i in items if i.resource_id == "n2"]
    assert [(i.seconds, i.amount_micros) for i in n2] == [(1050, 9_310_000), (1215, 10_773_000)]
    assert len({i.key for i in items}) == len(items)


def test_keys_are_stable_between_runs_so_a_rerun_charges_nothing_new() -> None:
    intervals = [RunningInterval("n0", at("10:00:00"), None)]
    first = compute_usage_items(
        compute_segments(intervals),
        gpus_per_node=8,
        on_demand_gpu_hour_usd=Decimal("3.99"),
        cutoff=at("11:30:00"),
    )
    later = compute_usage_items(
        compute_segments(intervals),
        gpus_per_node=8,
        on_demand_gpu_hour_usd=Decimal("3.99"),
        cutoff=at("12:30:00"),
    )
    assert [i.key for i in first] == [later[0].key]
    assert first[0] == later[0]
    assert len(later) == 2


def test_reserved_slots_cover_reserved_size_and_extra_nodes_are_on_demand() -> None:
    intervals = [
        RunningInterval("n0", at("10:05:00"), at("11:05:00", day=3)),
        RunningInterval("n1", at("10:05:00"), at("11:05:00", day=3)),
        RunningInterval("n2", at("14:00:00"), at("16:00:00")),
    ]
    segments = compute_segments(intervals, reserved_slots=2, coverage_end=at("10:05:00", day=3))
    assert segments == [
        ComputeSegment("n0", RES, at("10:05:00"), at("10:05:00", day=3)),
        ComputeSegment("n1", RES, at("10:05:00"), at("10:05:00", day=3)),
        ComputeSegment("n2", OD, at("14:00:00"), at("16:00:00")),
        ComputeSegment("n0", OD, at("10:05:00", day=3), at("11:05:00", day=3)),
        ComputeSegment("n1", OD, at("10:05:00", day=3), at("11:05:00", day=3)),
    ]
    items = compute_usage_items(
        segments, gpus_per_node=8, on_demand_gpu_hour_usd=Decimal("5.40"), cutoff=at("11:05:00", day=3)
    )
    on_demand = sum(i.amount_micros for i in items if i.kind is OD)
    assert on_demand == 86_400_000 + 2 * 43_200_000
    assert all(i.amount_micros == 0 for i in items if i.kind is RES)


def test_a_reserved_slot_freed_by_a_stop_goes_to_the_longest_running_on_demand_node() -> None:
    intervals = [
        RunningInterval("n0", at("10:00:00"), at("11:00:00")),
        RunningInterval("n1", at("10:30:00"), None),
        RunningInterval("n2", at("10:40:00"), None),
    ]
    segments = compute_segments(intervals, reserved_slots=1)
    assert segments == [
        ComputeSegment("n0", RES, at("10:00:00"), at("11:00:00")),
        ComputeSegment("n1", OD, at("10:30:00"), at("11:00:00")),
        ComputeSegment("n2", OD, at("10:40:00"), None),
        ComputeSegment("n1", RES, at("11:00:00"), None),
    ]


def test_first_time_running_needs_all_nodes_together() -> None:
    intervals = [
        RunningInterval("n0", at("10:00:00"), at("10:01:00")),  # failed acceptance, replaced
        RunningInterval("n1", at("10:01:00"), None),
        RunningInterval("n2", at("10:02:00"), None),
    ]
    assert first_time_running(intervals, 2) == at("10:02:00")
    assert first_time_running(intervals, 3) is None


def test_reservation_charge_is_the_whole_term_up_front_keyed_per_cluster() -> None:
    charge = reservation_charge(
        cluster_id="c1",
        node_count=2,
        gpus_per_node=8,
        on_demand_gpu_hour_usd=Decimal("5.40"),
        discount=Decimal("0.10"),
        duration_days=1,
        term_start=at("10:05:00"),
    )
    assert charge.key == "reservation:c1"
    assert charge.amount_micros == 1_866_240_000
    assert charge.gpu_hour_usd == Decimal("4.86")
    assert charge.term_end == at("10:05:00", day=3)


def test_storage_is_billed_per_tib_hour_for_the_volume_life() -> None:
    items = storage_usage_items(
        volume_id="v1",
        size_tib=Decimal(10),
        start=at("09:30:00"),
        end=at("15:30:00", day=3),
        tib_hour_usd=Decimal("0.1122"),
        cutoff=at("16:00:00", day=3),
    )
    assert sum(i.seconds for i in items) == 30 * 3600
    assert sum(i.amount_micros for i in items) == 33_660_000
    assert items[0].key == "storage:v1:20260302T093000Z:20260302T093000Z"
    assert len(items) == 31  # half hour, 29 whole hours, half hour


def test_unit_prices_recorded_on_items() -> None:
    items = compute_usage_items(
        [ComputeSegment("n0", OD, at("10:00:00"), at("10:00:01"))],
        gpus_per_node=1,
        on_demand_gpu_hour_usd=Decimal("4.29"),
        cutoff=at("11:00:00"),
    )
    assert items[0].unit_price_usd == Decimal("4.29")
    assert items[0].units == Decimal(1)
    assert items[0].amount_micros == 1192
    assert items[0].end - items[0].start == timedelta(seconds=1)


def test_without_gaps_removes_held_time() -> None:
    from backend.billing.meter import without_gaps

    intervals = [
        RunningInterval("n0", at("10:00:00"), None),
        RunningInterval("n1", at("10:00:00"), at("10:30:00")),
        RunningInterval("n2", at("13:00:00"), None),
    ]
    assert without_gaps(intervals, [(at("10:20:00"), at("12:00:00"))]) == [
        RunningInterval("n0", at("10:00:00"), at("10:20:00")),
        RunningInterval("n1", at("10:00:00"), at("10:20:00")),
        RunningInterval("n0", at("12:00:00"), None),
        RunningInterval("n2", at("13:00:00"), None),
    ]
    assert without_gaps(intervals, [(at("10:20:00"), None)]) == [
        RunningInterval("n0", at("10:00:00"), at("10:20:00")),
        RunningInterval("n1", at("10:00:00"), at("10:20:00")),
    ]


def test_an_interval_that_stops_within_its_first_second_is_ignored_by_reserved_slots() -> None:
    intervals = [
        RunningInterval("n0", at("10:00:00"), at("10:00:00")),
        RunningInterval("n1", at("10:00:00"), None),
    ]
    assert compute_segments(intervals, reserved_slots=1) == [ComputeSegment("n1", RES, at("10:00:00"), None)]


def test_unbilled_seconds_is_what_no_final_slice_covers_yet() -> None:
    from backend.billing.meter import accrued_micros, unbilled_seconds

    # Running since 10:20; at 12:16 the slices up to 12:00 are final (cutoff 12:15).
    assert unbilled_seconds(at("10:20:00"), None, cutoff=at("12:15:00"), now=at("12:16:00")) == 16 * 60
    assert unbilled_seconds(at("12:05:00"), None, cutoff=at("12:15:00"), now=at("12:16:00")) == 11 * 60
    assert unbilled_seconds(at("10:20:00"), at("12:10:00"), cutoff=at("12:15:00"), now=at("12:16:00")) == 0
    assert unbilled_seconds(at("10:20:00"), at("12:15:30"), cutoff=at("12:15:00"), now=at("12:16:00")) == 930
    segments = [
        ComputeSegment("n0", OD, at("10:00:00"), None),
        ComputeSegment("n1", RES, at("10:00:00"), None),
    ]
    accrued = accrued_micros(
        segments,
        gpus_per_node=8,
        on_demand_gpu_hour_usd=Decimal("3.99"),
        cutoff=at("11:15:00"),
        now=at("11:16:00"),
    )
    assert accrued == 8_512_000  # 16 minutes of one on-demand node; the reserved one is prepaid
