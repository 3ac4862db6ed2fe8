"""Conformance: `import {}` (by id, and by identity on Terraform 1.15) with `-generate-config-out`, and
state and identity upgrades across schema versions (identity on 1.15; Terraform 1.11 has none)."""

from __future__ import annotations

from acceptance.conformance.hcl import everything, header
from acceptance.harness import TerraformFactory


def test_conformance_import_block_generates_config_that_plans_clean(terraform: TerraformFactory) -> None:
    tf = terraform()
    store = tf.workdir / "remote.json"
    tf.write_main(header(store) + everything("original", deprecated=False))
    tf.init()
    tf.apply()
    (state,) = tf.show_json()["values"]["root_module"]["resources"]
    object_id = state["values"]["id"]

    # Forget it in Terraform, then import it with a generated configuration.
    tf.run("state", "rm", "conformance_everything.original")
    tf.write_main(
        header(store) + f'import {{\n  to = conformance_everything.adopted\n  id = "{object_id}"\n}}\n'
    )
    generated = tf.plan("-generate-config-out=generated.tf")
    assert "Plan: 1 to import, 0 to add, 0 to change, 0 to destroy." in generated.stdout
    hcl = (tf.workdir / "generated.tf").read_text()
    assert 'resource "conformance_everything" "adopted"' in hcl
    assert "revision" not in hcl  # computed-only attributes are not configuration

    replan = tf.plan()
    assert "Plan: 1 to import, 0 to add, 0 to change, 0 to destroy." in replan.stdout
    tf.apply()
    tf.assert_plan_empty()
    (adopted,) = tf.show_json()["values"]["root_module"]["resources"]
    assert adopted["values"] == state["values"]


def test_conformance_import_block_by_identity_generates_config(terraform: TerraformFactory) -> None:
    tf = terraform("1.15")
    store = tf.workdir / "remote.json"
    tf.write_main(header(store) + everything("original", deprecated=False))
    tf.init()
    tf.apply()
    (state,) = tf.show_json()["values"]["root_module"]["resources"]
    object_id = state["values"]["id"]
    assert state["identity"] == {"id": object_id}  # returned by create
    assert state["identity_schema_version"] == 0

    tf.run("state", "rm", "conformance_everything.original")
    tf.write_main(
        header(store)
        + f'import {{\n  to = conformance_everything.adopted\n  identity = {{ id = "{object_id}" }}\n}}\n'
    )
    generated = tf.plan("-generate-config-out=generated.tf")
    assert "Plan: 1 to import, 0 to add, 0 to change, 0 to destroy." in generated.stdout
    assert 'resource "conformance_everything" "adopted"' in (tf.workdir / "generated.tf").read_text()
    tf.apply()
    tf.assert_plan_empty()
    (adopted,) = tf.show_json()["values"]["root_module"]["resources"]
    assert adopted["values"] == state["values"]
    assert adopted["identity"] == {"id": object_id}


VERSIONED_V0 = 'resource "conformance_versioned" "v" {\n  title = "kept"\n}\n'
VERSIONED_V1 = 'resource "conformance_versioned" "v" {\n  name = "kept"\n}\n'


def test_conformance_state_upgrade_from_older_schema_version(
    terraform: TerraformFactory, tf_version: str
) -> None:
    tf = terraform(tf_version)
    store = tf.workdir / "remote.json"
    tf.env["CONFORMANCE_VERSIONED_SCHEMA"] = "0"
    tf.write_main(header(store) + VERSIONED_V0)
    tf.init()
    tf.apply()
    (old,) = tf.show_json()["values"]["root_module"]["resources"]
    assert old["schema_version"] == 0

    # The same provider at schema version 1 (title renamed to name, size added).
    tf.env["CONFORMANCE_VERSIONED_SCHEMA"] = "1"
    tf.write_main(header(store) + VERSIONED_V1)
    tf.assert_plan_empty()
    tf.apply()
    (new,) = tf.show_json()["values"]["root_module"]["resources"]
    assert new["schema_version"] == 1
    assert new["values"] == {"id": old["values"]["id"], "name": "kept", "size": 1}
    if tf_version != "1.11":  # identities (UpgradeResourceIdentity) exist from Terraform 1.12
        assert (old["identity_schema_version"], old["identity"]) == (0, {"id": old["values"]["id"]})
        assert new["identity_schema_version"] == 1
        assert new["identity"] == {"id": old["values"]["id"], "kind": "versioned"}
    tf.assert_plan_empty()  # UpgradeResourceState at the current version fills, changes nothing
