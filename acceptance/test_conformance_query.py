"""Conformance on Terraform 1.15: `terraform query` over a list resource (filters, results named by
identity) and `query -generate-config-out`, whose import blocks and configuration adopt the objects."""

from __future__ import annotations

from typing import Any

from acceptance.conformance.hcl import everything, header
from acceptance.harness import Terraform, TerraformFactory

LISTS = """
list "conformance_everything" "training" {
  provider = conformance
  config {
    name_prefix = "train"
  }
}

list "conformance_everything" "in_us" {
  provider = conformance
  config {
    region = "us-1"
  }
}
"""


def resources(tf: Terraform) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = tf.show_json()["values"]["root_module"]["resources"]
    return found


def test_conformance_query_lists_and_generates_import_config(terraform: TerraformFactory) -> None:
    tf = terraform("1.15")
    store = tf.workdir / "remote.json"
    tf.write_main(
        header(store)
        + everything("a", resource_name="train-a", deprecated=False)
        + everything("b", resource_name="train-b", region="us-1", deprecated=False)
        + everything("c", resource_name="infer", deprecated=False)
    )
    tf.init()
    tf.apply()
    ids = {r["values"]["name"]: r["values"]["id"] for r in resources(tf)}
    # Made by hand, as far as this configuration knows: nothing in state, nothing configured.
    (tf.workdir / "terraform.tfstate").unlink()
    tf.write_main(header(store))

    tf.write("search.tfquery.hcl", LISTS)
    found = [line.split() for line in tf.run("query").stdout.splitlines() if line.startswith("list.")]
    assert sorted(found) == sorted([
        ["list.conformance_everything.training", f"id={ids['train-a']}", "train-a"],
        ["list.conformance_everything.training", f"id={ids['train-b']}", "train-b"],
        ["list.conformance_everything.in_us", f"id={ids['train-b']}", "train-b"],
    ])

    tf.write("search.tfquery.hcl", LISTS.split('list "conformance_everything" "in_us"')[0])
    tf.run("query", "-generate-config-out=found.tf")
    generated = (tf.workdir / "found.tf").read_text()
    assert generated.count("import {") == 2 and generated.count('resource "conformance_everything"') == 2
    assert f'id = "{ids["train-a"]}"' in generated and "infer" not in generated

    plan = tf.plan()
    assert "Plan: 2 to import, 0 to add, 0 to change, 0 to destroy." in plan.stdout
    tf.apply()
    tf.assert_plan_empty()
    adopted = {r["values"]["name"]: r["identity"] for r in resources(tf)}
    assert adopted == {"train-a": {"id": ids["train-a"]}, "train-b": {"id": ids["train-b"]}}
