"""The CLI's formatting: exact JSON, plain tables off a terminal, status colours on one, one-line errors
(from problem documents served by httpx.MockTransport) and the forfeit notice of a reserved cluster (ssh
command lines: test_cli_ssh.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import httpx
import pytest

from provider.cli import output
from provider.cli.clusters import forfeit_notice, show_cluster
from provider.cli.main import error_line
from provider.client import ApiError, TransportError
from tests.provider.client.fakes import ScriptedApi, make_client, problem


def test_cli_json_keeps_the_apis_numbers_exact() -> None:
    value = {"max_hourly_cost_usd": Decimal("99.9900"), "nodes": [], "labels": {}, "ok": True, "n": 2}
    text = output.dumps_json(value)
    assert '"max_hourly_cost_usd": 99.9900' in text
    assert json.loads(text) == {"max_hourly_cost_usd": 99.99, "nodes": [], "labels": {}, "ok": True, "n": 2}


def test_cli_table_is_plain_aligned_text_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"id": "cls_1", "status": "RUNNING"}, {"id": "cls_22", "status": None}]
    output.print_table([("ID", lambda r: r["id"]), ("STATUS", lambda r: r["status"])], rows, empty="none")
    assert capsys.readouterr().out == "ID      STATUS\ncls_1   RUNNING\ncls_22  -\n"


def test_cli_table_colours_the_lifecycle_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    assert output.styled_status("RUNNING").style == "bold green"
    assert output.styled_status("FAILED").style == "bold red"
    assert output.styled_status("PENDING").style == "yellow"
    assert output.styled_status("RUNNING (repairing)").style == "bold green"
    assert output.styled_status("degraded").style == "bold yellow"  # node health
    assert output.styled_status("DRAIN").style == "yellow"  # Slurm's node state
    monkeypatch.setattr(output, "is_terminal", lambda: True)
    console = output.Console(record=True, force_terminal=True, width=80)
    monkeypatch.setattr(output, "stdout_console", lambda min_width=0: console)
    columns = [("STATUS", "status"), ("HEALTH", "health"), ("NAME", "name")]
    output.print_table(columns, [{"status": "FAILED", "health": "healthy", "name": "failed"}], empty="")
    text = console.export_text(styles=True)
    assert "\x1b[1;31mFAILED" in text and "\x1b[32mhealthy" in text
    assert "\x1b[1;31mfailed" not in text  # a name is not a status


def test_cli_empty_listing_says_so_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    output.print_table([("ID", lambda r: r["id"])], [], empty="No clusters")
    captured = capsys.readouterr()
    assert captured.out == "" and "No clusters" in captured.err


def _error_from(response: httpx.Response) -> ApiError:
    with make_client(ScriptedApi(response)) as client, pytest.raises(ApiError) as raised:
        client.get_cluster("cls_x")
    return raised.value


def test_cli_error_line_has_the_apis_message_field_and_request_id() -> None:
    error = _error_from(problem(422, "unknown_instance_type", "unknown instance type '9x'", "instance_type"))
    line = error_line(error)
    assert line == (
        "unknown instance type '9x' (unknown_instance_type, HTTP 422); field instance_type; request id req-1"
    )
    assert "\n" not in line


def test_cli_error_line_of_an_outage_names_the_endpoint() -> None:
    api = ScriptedApi(*[httpx.ConnectError("refused")] * 5)
    with make_client(api) as client, pytest.raises(TransportError) as raised:
        client.list_clusters()
    line = error_line(raised.value)
    assert line.startswith("could not reach the API at http://api.test:8080") and "GPUCLOUD_ENDPOINT" in line


RESERVED = {
    "billing": {"type": "reserved", "duration_days": 10},
    "reservation": {
        "term_start": "2026-01-01T00:00:00Z",
        "term_end": "2026-01-11T00:00:00Z",
        "upfront_usd": "1000.00",
        "expired": False,
    },
}


def test_cli_forfeit_notice_says_what_prepaid_time_is_lost() -> None:
    notice = forfeit_notice(RESERVED, now=datetime(2026, 1, 8, 12, tzinfo=UTC))
    assert notice is not None
    assert "reserved until 2026-01-11 00:00 UTC" in notice
    assert "remaining 2d 12h" in notice and "about 250.00 of 1000.00 USD" in notice


def test_cli_forfeit_notice_only_for_a_started_reserved_term() -> None:
    assert forfeit_notice({"billing": {"type": "on_demand"}, "reservation": None}) is None
    not_started = forfeit_notice({"billing": {"type": "reserved", "duration_days": 7}, "reservation": None})
    assert not_started == (
        "This cluster is reserved for 7 days; its term has not started "
        "(nothing prepaid has been charged yet)."
    )
    expired = {**RESERVED, "reservation": {**RESERVED["reservation"], "expired": True}}
    assert forfeit_notice(expired) is None


def test_cli_live_status_line_ticks_between_polls() -> None:
    from provider.cli.wait import LiveLine

    now = [100.0]
    line = LiveLine(clock=lambda: now[0])
    line.cluster = {"name": "t", "status": "PROVISIONING", "phase": "ProvisioningNodes", "node_count": 2,
                    "nodes": [{"status": "RUNNING"}, {"status": "PROVISIONING"}]}
    now[0] += 75
    text = line.__rich__()
    assert text.plain == "t PROVISIONING · ProvisioningNodes · nodes 1/2 running · 1m15s"
    assert text.style == "cyan"


@pytest.mark.parametrize(
    ("capacity", "shown"),
    [("spot", "spot"), ("spot_with_fallback", "spot with fallback"), ("on_demand", "on demand"),
     (None, "on demand")],
)
def test_cli_cluster_info_shows_the_capacity_it_is_billed_at(
    capacity: str | None, shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = {"id": "cls_1", "name": "a", "status": "RUNNING", "node_count": 1, "instance_type": "8xH100",
               "region": "us-east-1", "billing": {"type": "on_demand"}, "capacity_type": capacity,
               "estimated_hourly_cost_usd": Decimal("12.768")}
    show_cluster(cluster)
    billing = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("Billing"))
    assert billing.split(None, 1)[1].strip() == shown


def test_cli_cluster_info_says_a_drawn_reservation_prepays_it(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = {"id": "cls_1", "name": "a", "status": "RUNNING", "node_count": 1, "instance_type": "8xH100",
               "region": "us-east-1", "billing": {"type": "on_demand"}, "reservation_id": "rsv_1"}
    show_cluster(cluster)
    assert "reservation rsv_1 (prepaid)" in capsys.readouterr().out
