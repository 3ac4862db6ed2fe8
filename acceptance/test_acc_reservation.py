"""gpucloud_reservation against the real backend (engine at a fast simulation speed), the real provider
launch path and Terraform 1.11: a labelled reservation and a cluster drawing all its nodes; a mismatched
cluster refused at plan time naming the attribute; the cluster replaced draws the nodes its predecessor
gave back, and billing shows one up-front charge for the term (docs/billing.md, "Capacity reservations")."""

from __future__ import annotations

import os
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from acceptance.backend import Backend, _cli
from acceptance.cluster_backend import fast_backend
from acceptance.gpucloud_steps import GpuCloudTerraform, apply_and_check, gpucloud_tf, plan_error, values
from provider.client import PreconditionFailed

__all__ = ["gpucloud_tf"]

CLUSTER = "gpucloud_gpu_cluster.train"
RESERVATION = "gpucloud_reservation.block"


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with fast_backend(tmp_path_factory.mktemp("backend")) as server:
        yield server


def config(extra: str = "") -> str:
    return f"""
    resource "gpucloud_reservation" "block" {{
      name          = "h100 block"
      region        = "us-east-1"
      instance_type = "8xH100"
      node_count    = 2
      duration_days = 1
      labels        = {{ team = "nlp" }}
    }}

    resource "gpucloud_gpu_cluster" "train" {{
      name           = "train"
      region         = "us-east-1"
      instance_type  = "8xH100"
      node_count     = 2
      reservation_id = gpucloud_reservation.block.id
    }}
    {extra}
    """


def test_acc_reservation_cluster_replaced_keeps_the_term(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    tf = gpucloud_tf(config())
    apply_and_check(tf)
    block, first = values(tf, RESERVATION), values(tf, CLUSTER)
    assert block["id"].startswith("rsv_") and Decimal(str(block["upfront_cost_usd"])) == Decimal("1378.944")
    assert first["reservation_id"] == block["id"] and first["status"] == "RUNNING"
    assert first["estimated_hourly_cost_usd"] == 0  # prepaid
    remote = backend.client.get_reservation(block["id"])
    assert (remote["free_nodes"], remote["cluster_ids"]) == (0, [first["id"]])
    assert block["labels"] == remote["labels"] == {"team": "nlp"}

    wrong_region = """
    resource "gpucloud_gpu_cluster" "elsewhere" {
      name           = "elsewhere"
      region         = "us-west-2"
      instance_type  = "8xH100"
      reservation_id = gpucloud_reservation.block.id
    }
    """
    tf.write_main(config(wrong_region))
    output = plan_error(tf)
    assert "Cluster Does Not Match Its Reservation" in output and 'region = "us-east-1"' in output, output
    tf.write_main(config())

    # Replaced: the old cluster's nodes go back to the reservation, the new one draws them.
    tf.apply(f"-replace={CLUSTER}")
    tf.assert_plan_empty()
    second = values(tf, CLUSTER)
    assert second["id"] != first["id"] and second["status"] == "RUNNING"
    remote = backend.client.get_reservation(block["id"])
    assert (remote["free_nodes"], remote["cluster_ids"]) == (0, [second["id"]])

    _cli({**os.environ, "GPUCLOUD_DATA_DIR": str(backend.data_dir)}, "billing-run", "--once")
    usage = backend.client.request("GET", "/v1/billing/usage").body["items"]
    assert [(u["kind"], u["resource_id"], u["amount_usd"]) for u in usage] == [
        ("reservation", block["id"], "1378.944000")
    ]
    tf.destroy()
    assert backend.client.request("GET", "/v1/reservations").body["items"] == []


WEEK = """
resource "gpucloud_reservation" "week" {
  name          = "%s"
  region        = "us-east-1"
  instance_type = "8xH100"
  node_count    = 1
  duration_days = 7
  labels        = { team = "%s" }
}
"""
WEEK_ADDRESS = "gpucloud_reservation.week"


def planned_change(tf: Any, address: str) -> dict[str, Any]:
    """The change `plan -out` records for `address` (actions, before, after, after_unknown)."""
    tf.plan("-out=change.tfplan")
    for change in tf.show_json("change.tfplan")["resource_changes"]:
        if change["address"] == address:
            found: dict[str, Any] = change["change"]
            return found
    raise AssertionError(f"{address} has no planned change")


def test_acc_reservation_upfront_at_plan_rename_in_place_and_forfeit_warning(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    # Issue 27: upfront_cost_usd was known only after apply, a rename replaced the reservation (a second
    # booking and charge), and destroying one with days left warned of nothing.
    tf = gpucloud_tf(WEEK % ("week", "nlp"))
    change = planned_change(tf, WEEK_ADDRESS)
    assert change["actions"] == ["create"] and not change["after_unknown"].get("upfront_cost_usd")
    planned = Decimal(str(change["after"]["upfront_cost_usd"]))
    tf.apply(plan_file="change.tfplan")
    tf.assert_plan_empty()
    booked = values(tf, WEEK_ADDRESS)
    remote = backend.client.get_reservation(booked["id"])
    assert planned == Decimal(remote["upfront_usd"]) == Decimal("4558.176")  # 168 h x 8 GPUs x 3.3915

    tf.write_main(WEEK % ("week renamed", "cv"))
    change = planned_change(tf, WEEK_ADDRESS)
    assert change["actions"] == ["update"]
    changed = {k for k in change["after"] if change["after"][k] != change["before"][k]}
    assert changed == {"name", "labels"} and not any(change["after_unknown"].values()), change
    tf.apply(plan_file="change.tfplan")
    tf.assert_plan_empty()
    renamed = values(tf, WEEK_ADDRESS)
    assert renamed["id"] == booked["id"] and renamed["upfront_cost_usd"] == booked["upfront_cost_usd"]
    remote = backend.client.get_reservation(booked["id"])
    assert (remote["name"], remote["labels"]) == ("week renamed", {"team": "cv"})
    held = [r["id"] for r in backend.client.request("GET", "/v1/reservations").body["items"]]
    assert held == [booked["id"]]  # no second booking
    with pytest.raises(PreconditionFailed):  # a write from a stale read is refused, not lost
        backend.client.reservations.update(booked["id"], {"name": "late"}, if_match='"stale"')

    output = " ".join(tf.plan("-destroy").output.split())
    assert "Warning: Reserved Term Forfeited" in output, output
    assert f"Destroying reservation {booked['id']} ends its reserved term early: 7.0 days are left" in output
    assert "about 4,558 USD of the 4,558.18 USD paid up front is forfeited" in output
    tf.destroy()
