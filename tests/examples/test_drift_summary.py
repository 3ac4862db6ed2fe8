"""examples/ci/drift_summary.py: what the CI drift job prints and its exit status, from plan JSON."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "ci" / "drift_summary.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("drift_summary", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


drift_summary = load()


def drift(address: str, before: Any, after: Any, **extra: Any) -> dict[str, Any]:
    actions = ["delete"] if after is None else ["update"]
    return {"address": address, "change": {"actions": actions, "before": before, "after": after, **extra}}


def test_drift_summary_no_drift_when_the_plan_holds_none() -> None:
    # Terraform < 1.15 can exit 2 from such a plan (hashicorp/terraform#36403): this is the truth.
    drifted, text = drift_summary.summarise({"resource_drift": [], "output_changes": {
        "cost": {"actions": ["no-op"], "before": 1, "after": 1}}})
    assert not drifted and text.startswith("No drift")


def test_drift_summary_names_each_changed_attribute() -> None:
    before = {"name": "a", "node_count": 2, "labels": {"team": "nlp", "cost-center": "x"},
              "nodes": [{"status": "RUNNING"}, {"status": "RUNNING"}]}
    after = {"name": "a", "node_count": 1, "labels": {"team": "nlp", "owner": "ops"},
             "nodes": [{"status": "RUNNING"}]}
    plan = {"resource_drift": [drift("gpucloud_gpu_cluster.a", before, after)]}
    drifted, text = drift_summary.summarise(plan)
    assert drifted
    assert "~ gpucloud_gpu_cluster.a: changed outside Terraform" in text
    assert '    labels.cost-center: "x" -> (absent)' in text
    assert '    labels.owner: (absent) -> "ops"' in text
    assert "    node_count: 2 -> 1" in text
    assert '    nodes: [{"status": "RUNNING"}, {"status": "RUNNING"}] -> [{"status": "RUNNING"}]' in text
    assert "name:" not in text  # unchanged attributes are not listed


def test_drift_summary_reports_deleted_resources_and_hides_sensitive_values() -> None:
    plan = {"resource_drift": [
        drift("gpucloud_ssh_key.k", {"id": "key_1"}, None),
        drift("gpucloud_gpu_cluster.a", {"token": "s3cret", "n": [1, 2]}, {"token": "other", "n": [1, 3]},
              before_sensitive={"token": True}),
    ]}
    drifted, text = drift_summary.summarise(plan)
    assert drifted and "- gpucloud_ssh_key.k: deleted outside Terraform" in text
    assert "token: (sensitive value changed)" in text and "s3cret" not in text and "other" not in text
    assert "n[1]: 2 -> 3" in text


def test_drift_summary_limits_long_reports() -> None:
    before = {f"k{i:02d}": i for i in range(40)}
    after = {key: value + 1 for key, value in before.items()}
    _, text = drift_summary.summarise({"resource_drift": [drift("x.y", before, after)]})
    assert "... and 15 more" in text and "k24: 24 -> 25" in text and "k25:" not in text


def test_drift_summary_main_exits_2_on_drift(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    plan = {"output_changes": {"login": {"actions": ["update"], "before": "ssh a", "after": "ssh b"}}}
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(plan)))
    assert drift_summary.main() == 2
    assert '~ output.login: "ssh a" -> "ssh b"' in capsys.readouterr().out
