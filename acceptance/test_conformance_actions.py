"""Conformance on Terraform 1.15: actions, invoked by hand (`terraform apply -invoke=...`) and from a
resource's `action_trigger`, with progress messages shown as they come and failures as diagnostics."""

from __future__ import annotations

import json
from pathlib import Path

from acceptance.conformance.hcl import header
from acceptance.harness import TerraformFactory

ACTIONS = """
action "conformance_note" "hello" {
  config {
    message = "hello"
    steps   = 2
  }
}

action "conformance_note" "broken" {
  config {
    message = "broken"
    steps   = 3
    fail_at = 2
  }
}
"""


def action_log(store: Path) -> list[str]:
    """The recorded notes, in order (values are JSON strings in the store)."""
    if not store.exists():
        return []
    notes = json.loads(store.read_text()).get("action_log", {})
    ordered = sorted(notes.items(), key=lambda item: int(item[0].rsplit("-", 1)[-1]))
    return [json.loads(value) for _, value in ordered]


def test_conformance_action_invoked_with_progress_and_failure(terraform: TerraformFactory) -> None:
    tf = terraform("1.15")
    store = tf.workdir / "remote.json"
    tf.write_main(header(store) + ACTIONS)
    tf.init()

    invoked = tf.apply("-invoke=action.conformance_note.hello")
    shown = [line for line in invoked.stdout.splitlines() if line.startswith("Action ")]
    assert shown == [
        "Action started: action.conformance_note.hello (triggered by CLI)",
        "Action action.conformance_note.hello (triggered by CLI): step 1/2: recorded 'hello'",
        "Action action.conformance_note.hello (triggered by CLI): step 2/2: recorded 'hello'",
        "Action complete: action.conformance_note.hello (triggered by CLI)",
    ]
    assert action_log(store) == ["hello:1", "hello:2"]
    assert tf.state_list() == []  # an action leaves nothing in state

    failed = tf.apply("-invoke=action.conformance_note.broken", check=False)
    assert failed.returncode == 1
    assert "step 1/3: recorded 'broken'" in failed.stdout
    assert "Step 2 of 3 failed as configured." in failed.output
    assert action_log(store) == ["hello:1", "hello:2", "broken:1"]


def test_conformance_action_triggered_after_create_and_validated(terraform: TerraformFactory) -> None:
    tf = terraform("1.15")
    store = tf.workdir / "remote.json"
    triggered = ACTIONS + """
resource "conformance_simple" "x" {
  value = "v1"
  lifecycle {
    action_trigger {
      events  = [after_create, after_update]
      actions = [action.conformance_note.hello]
    }
  }
}
"""
    tf.write_main(header(store) + triggered)
    tf.init()
    tf.apply()
    assert action_log(store) == ["hello:1", "hello:2"]
    tf.assert_plan_empty()  # no change: the trigger does not fire again
    tf.write_main(header(store) + triggered.replace('"v1"', '"v2"'))
    tf.apply()
    assert action_log(store) == ["hello:1", "hello:2", "hello:1", "hello:2"]

    tf.write_main(header(store) + ACTIONS.replace("steps   = 2", "steps   = 20"))
    invalid = tf.validate(check=False)
    assert invalid.returncode == 1 and "steps" in invalid.output
