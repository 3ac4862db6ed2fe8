"""gpucloud_reservation against the real backend (engine at a fast simulation speed), the real provider
launch path and Terraform 1.11: a labelled reservation and a cluster drawing all its nodes; a mismatched
cluster refused at plan time naming the attribute; the cluster replaced draws the nodes its predecessor
gave back, and billing shows one up-front charge for the term (docs/billing.md, "Capacity reservations")."""

from __future__ import annotations

import os
from collections.abc import Iterator
from decimal import Decimal

import pytest

from acceptance.backend import Backend, _cli
from acceptance.cluster_backend import fast_backend
from acceptance.gpucloud_steps import GpuCloudTerraform, apply_and_check, gpucloud_tf, plan_error, values

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
