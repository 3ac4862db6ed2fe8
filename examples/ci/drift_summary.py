"""Summarise the drift in a refresh-only plan: `terraform show -json PLAN | python3 drift_summary.py`.

Prints which resources changed outside Terraform and, attribute by attribute, how; exit status 2 when
something drifted, 0 when nothing did. Terraform can exit 2 from a refresh-only plan that changed
nothing visible (provider-private data refreshed; before 1.15 also hashicorp/terraform#36403): the
plan's own `resource_drift` and `output_changes` are the truth. Standard library only, so it runs on
any CI runner with Python 3.
"""

from __future__ import annotations

import json
import sys
from typing import Any

MAX_LINES_PER_RESOURCE = 25
MAX_VALUE_CHARS = 80
_ABSENT = object()


def render(value: Any) -> str:
    """A value as HCL-ish text, shortened for a log line."""
    if value is _ABSENT:
        return "(absent)"
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 3] + "..."


def _sensitive(marks: Any) -> bool:
    return marks is True


def _child(marks: Any, key: str | int) -> Any:
    if isinstance(marks, dict) and isinstance(key, str):
        return marks.get(key)
    if isinstance(marks, list) and isinstance(key, int) and key < len(marks):
        return marks[key]
    return None


def attribute_changes(before: Any, after: Any, path: str = "", marks: Any = None) -> list[str]:
    """One `path: before -> after` line per leaf that differs (objects and equal-length lists are
    walked; other collections are shown whole). Sensitive paths show no values."""
    if before == after:
        return []
    if _sensitive(marks):
        return [f"{path or '(object)'}: (sensitive value changed)"]
    if isinstance(before, dict) and isinstance(after, dict):
        lines: list[str] = []
        for key in sorted(set(before) | set(after)):
            lines += attribute_changes(
                before.get(key, _ABSENT), after.get(key, _ABSENT), f"{path}.{key}" if path else key,
                _child(marks, key),
            )
        return lines
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        lines = []
        for index, (old, new) in enumerate(zip(before, after, strict=True)):
            lines += attribute_changes(old, new, f"{path}[{index}]", _child(marks, index))
        return lines
    return [f"{path or '(object)'}: {render(before)} -> {render(after)}"]


def resource_lines(drift: dict[str, Any]) -> list[str]:
    change = drift.get("change") or {}
    address = drift.get("address", "?")
    if change.get("after") is None:
        return [f"- {address}: deleted outside Terraform (the next apply re-creates it)"]
    changes = attribute_changes(
        change.get("before"), change.get("after"), marks=change.get("before_sensitive")
    )
    shown = changes[:MAX_LINES_PER_RESOURCE]
    if len(changes) > len(shown):
        shown.append(f"... and {len(changes) - len(shown)} more")
    return [f"~ {address}: changed outside Terraform", *(f"    {line}" for line in shown)]


def summarise(plan: dict[str, Any]) -> tuple[bool, str]:
    """(drifted, text) for a refresh-only plan's JSON."""
    drifted = [
        d for d in plan.get("resource_drift") or [] if (d.get("change") or {}).get("actions") != ["no-op"]
    ]
    outputs = {
        name: change for name, change in (plan.get("output_changes") or {}).items()
        if change.get("actions") != ["no-op"]
    }
    if not drifted and not outputs:
        return False, "No drift: every resource matches the state of the last apply."
    lines = [f"Drift detected: {len(drifted)} resource(s) changed outside Terraform."]
    for drift in drifted:
        lines += resource_lines(drift)
    for name, change in sorted(outputs.items()):
        if change.get("before_sensitive") or change.get("after_sensitive"):
            lines.append(f"~ output.{name}: (sensitive value changed)")
        else:
            lines.append(f"~ output.{name}: {render(change.get('before'))} -> {render(change.get('after'))}")
    lines += [
        "",
        "To accept these changes into the state: terraform apply -refresh-only.",
        "To put the infrastructure back as configured: run the plan and apply jobs (terraform apply).",
    ]
    return True, "\n".join(lines)


def main() -> int:
    plan = json.load(sys.stdin)
    drifted, text = summarise(plan)
    print(text)
    return 2 if drifted else 0


if __name__ == "__main__":
    sys.exit(main())
