"""The conformance provider's action: records each invocation in the store, reporting progress."""

from __future__ import annotations

from collections.abc import Iterator

from acceptance.conformance.data import ConformanceData
from provider.cty import STRING
from provider.framework import (
    Action,
    Context,
    DiagnosticError,
    Int64Attribute,
    Schema,
    State,
    StringAttribute,
)
from provider.framework.validators import int_between


class NoteAction(Action):
    """Writes `message` to the store's `action_log` in `steps` steps, one progress message per step;
    `fail_at` makes step N fail (after the earlier ones were reported)."""

    type_name = "conformance_note"
    schema = Schema(
        description="Records a message in the remote store, step by step.",
        attributes={
            "message": StringAttribute(required=True, description="What to record."),
            "steps": Int64Attribute(
                optional=True, description="How many steps (default 2).", validators=[int_between(1, 10)]
            ),
            "fail_at": Int64Attribute(optional=True, description="Fail at this step (tests)."),
        },
    )

    def plan(self, ctx: Context, config: State) -> None:
        if config.get("message") == "":
            ctx.error("Empty Message", "message must not be empty.")

    def invoke(self, ctx: Context, config: State) -> Iterator[str]:
        data: ConformanceData = ctx.provider_data
        steps = int(config.get("steps") or 2)
        for step in range(1, steps + 1):
            if config.get("fail_at") == step:
                raise DiagnosticError("Note Failed", f"Step {step} of {steps} failed as configured.")
            data.store.put("action_log", data.store.next_id("note"), f"{config['message']}:{step}", STRING)
            yield f"step {step}/{steps}: recorded {config['message']!r}"
