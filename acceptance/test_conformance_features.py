"""Conformance on Terraform 1.11 (the smoke case also on 1.15): unknown values across resources, data
source, ephemeral resource, provider function, moved {} across types, plan-time validation, internal
errors, timeouts and Ctrl-C, and provider logs with terraform-plugin-go's per-RPC fields."""

from __future__ import annotations

import json
import re

from acceptance.conformance.hcl import header
from acceptance.harness import TerraformFactory

WIRING = """
resource "conformance_simple" "source" {
  value = "seed"
}

# Unknown at plan time: the id of a resource not created yet flows into another resource.
resource "conformance_everything" "dependent" {
  name  = conformance_simple.source.id
  tags  = [conformance_simple.source.id, "fixed"]
  rules = [{ port = 8080, protocol = conformance_simple.source.id }]
}

ephemeral "conformance_token" "session" {
  length = 12
}

# An ephemeral value configures a provider; it never reaches state or plan.
provider "conformance" {
  alias = "with_token"
  store = "STORE"
  token = ephemeral.conformance_token.session.value
}

data "conformance_echo" "hello" {
  provider = conformance.with_token
  input    = "hi"
}

resource "conformance_simple" "joined" {
  value = provider::conformance::join("-", "a", "b", data.conformance_echo.hello.output)
}

output "token_length" {
  value = data.conformance_echo.hello.token_length
}
"""


def test_conformance_smoke_unknowns_ephemeral_function_and_data_source(
    terraform: TerraformFactory, tf_version: str
) -> None:
    tf = terraform(tf_version)
    store = tf.workdir / "remote.json"
    tf.write_main(header(store) + WIRING.replace("STORE", str(store)))
    tf.init()

    plan = tf.plan_changes()
    assert "Plan: 3 to add, 0 to change, 0 to destroy." in plan.stdout
    assert re.search(r"\+ name +\= \(known after apply\)", plan.stdout)  # unknown passes validation
    assert '+ value = "a-b-HI"' in plan.stdout  # function and data source evaluated at plan time

    tf.apply()
    tf.assert_plan_empty()
    values = {r["address"]: r["values"] for r in tf.show_json()["values"]["root_module"]["resources"]}
    source_id = values["conformance_simple.source"]["id"]
    assert values["conformance_everything.dependent"]["name"] == source_id
    assert values["conformance_everything.dependent"]["rules"] == [
        {"port": 8080, "protocol": source_id, "rule_id": "rule-8080"}
    ]
    assert tf.output_json()["token_length"]["value"] == 12
    log = [json.loads(entry) for entry in json.loads(store.read_text())["ephemeral_log"].values()]
    assert log and all(entry.startswith("closed:") for entry in log)  # every open was closed
    state_text = (tf.workdir / "terraform.tfstate").read_text()
    for entry in log:
        token = entry.removeprefix("closed:")
        assert len(token) == 12
        assert token not in state_text and token not in plan.stdout


def flat(text: str) -> str:
    """Terraform wraps diagnostics to the terminal width: compare with whitespace collapsed."""
    return " ".join(text.split())


MOVE_BEFORE = 'resource "conformance_simple" "old" {\n  value = "moving"\n}\n'
MOVE_AFTER = """
resource "conformance_renamed" "new" {
  text = "moving"
}

moved {
  from = conformance_simple.old
  to   = conformance_renamed.new
}
"""


def test_conformance_moved_across_resource_types(terraform: TerraformFactory) -> None:
    tf = terraform()
    store = tf.workdir / "remote.json"
    tf.write_main(header(store) + MOVE_BEFORE)
    tf.init()
    tf.apply()
    (old,) = tf.show_json()["values"]["root_module"]["resources"]

    tf.write_main(header(store) + MOVE_AFTER)
    plan = tf.plan_changes()
    assert "conformance_simple.old has moved to conformance_renamed.new" in plan.stdout
    assert "0 to add, 0 to change, 0 to destroy" in plan.stdout
    tf.apply()
    tf.assert_plan_empty()
    (new,) = tf.show_json()["values"]["root_module"]["resources"]
    assert new["address"] == "conformance_renamed.new"
    assert new["values"] == {"id": old["values"]["id"], "text": "moving"}


def test_conformance_errors_are_diagnostics(terraform: TerraformFactory) -> None:
    tf = terraform()
    store = tf.workdir / "remote.json"
    tf.write_main(header(store))
    tf.init()

    # A validator error at plan time names the attribute.
    tf.write(
        "bad.tf",
        'resource "conformance_everything" "bad" {\n  name = "has spaces and is far too long for names"\n}\n',
    )
    invalid = tf.plan(check=False)
    assert invalid.returncode == 1
    assert "Attribute name string length must be between 1 and 32" in flat(invalid.stderr)
    assert "Attribute name must contain only letters, digits" in flat(invalid.stderr)
    assert "with conformance_everything.bad" in flat(invalid.stderr)
    tf.remove("bad.tf")

    # A provider bug (exception) in plan and in apply: a diagnostic, never a crash.
    tf.write("failing.tf", 'resource "conformance_failing" "f" {\n  fail_in = "plan"\n}\n')
    in_plan = tf.plan(check=False)
    assert in_plan.returncode == 1
    assert "Internal Provider Error" in flat(in_plan.stderr)
    assert "KeyError" in flat(in_plan.stderr)
    tf.write("failing.tf", 'resource "conformance_failing" "f" {\n  fail_in = "apply"\n}\n')
    in_apply = tf.apply(check=False)
    assert in_apply.returncode == 1
    assert "ZeroDivisionError: deliberate bug in create" in flat(in_apply.stderr)
    for result in (in_plan, in_apply):
        assert "plugin crashed" not in result.stderr.lower() and "panic" not in result.stderr.lower()
    assert tf.state_list() == []

    # The provider function reports a bad argument with its position.
    tf.write("failing.tf", 'output "j" {\n  value = provider::conformance::join("", "a")\n}\n')
    bad_argument = tf.plan(check=False)
    assert bad_argument.returncode == 1
    assert "separator must not be empty" in flat(bad_argument.stderr)


def test_conformance_timeouts_and_ctrl_c_stop_provider(terraform: TerraformFactory) -> None:
    tf = terraform()
    store = tf.workdir / "remote.json"
    # Creates that would take an hour: that the apply ends at all (the harness gives a command 10 minutes)
    # shows the 1 s timeout, then the Ctrl-C, ended the wait; no bet on how fast a busy machine is.
    tf.write_main(
        header(store) + 'resource "conformance_slow" "t" {\n  seconds = 3600\n'
        '  timeouts {\n    create = "1s"\n  }\n}\n'
    )
    tf.init()
    timed_out = tf.apply(check=False)
    assert timed_out.returncode == 1
    assert "Timed Out Creating Slow Resource" in timed_out.stderr

    tf.write_main(header(store) + 'resource "conformance_slow" "s" {\n  seconds = 3600\n}\n')
    running = tf.start("apply", "-auto-approve")
    try:
        # Ctrl-C right at "Creating...": the provider also cancels an apply that arrives after StopProvider.
        running.wait_for_output(r"conformance_slow\.s: Creating\.\.\.")
        running.interrupt()
        result = running.wait()
    finally:
        running.kill()
    assert result.returncode == 1
    assert "Interrupt received" in result.stdout
    assert "Operation Cancelled" in result.stderr
    assert "plugin crashed" not in result.stderr.lower()
    assert tf.state_list() == []


def test_conformance_logs_carry_rpc_fields_and_honour_the_provider_level(terraform: TerraformFactory) -> None:
    tf = terraform()
    simple = 'resource "conformance_simple" "s" {\n  value = "x"\n}\n'
    tf.write_main(header(tf.workdir / "remote.json") + simple)
    tf.init()
    traced = tf.run("plan", env={"TF_LOG": "trace"}).stderr.splitlines()
    (planned,) = [line for line in traced if "Received request" in line and "=PlanResourceChange" in line]
    assert "tf_resource_type=conformance_simple" in planned
    assert "tf_provider_addr=registry.terraform.io/gpucloud/conformance" in planned
    assert re.search(r"tf_req_id=[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", planned)

    # TF_LOG_PROVIDER_<TYPE> quiets (or raises) this provider alone, as for Go providers.
    quiet = tf.run("plan", env={"TF_LOG": "trace", "TF_LOG_PROVIDER_CONFORMANCE": "off"}).stderr
    assert "tf_rpc=" not in quiet and "[TRACE] backend/local" in quiet
