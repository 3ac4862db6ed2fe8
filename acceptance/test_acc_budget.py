"""gpucloud_budget against the real backend, real provider launch path and Terraform: created with its
defaults, updated in place, imported, a bad amount refused at plan time, destroyed."""

from __future__ import annotations

from acceptance.backend import Backend
from acceptance.gpucloud_steps import (
    GpuCloudTerraform,
    apply_and_check,
    backend,
    gpucloud_tf,
    import_verify,
    plan_error,
    plan_text,
    values,
)
from provider.client import NotFound

__all__ = ["backend", "gpucloud_tf"]  # fixtures used by the tests below

ADDRESS = "gpucloud_budget.nlp"


def budget_config(amount: str, extra: str = "") -> str:
    return f"""
    resource "gpucloud_budget" "nlp" {{
      name         = "nlp monthly"
      amount_usd   = {amount}
      label_filter = {{ key = "team", value = "nlp" }}
      {extra}
    }}
    """


def test_acc_budget_lifecycle(gpucloud_tf: GpuCloudTerraform, backend: Backend) -> None:
    tf = gpucloud_tf(budget_config("1500"))
    code, output = plan_text(tf)
    assert code == 2 and 'action = "notify"' in output and "1 to add" in output, output
    apply_and_check(tf)
    state = values(tf, ADDRESS)
    assert state["id"].startswith("bud_") and sorted(state["thresholds"]) == [50, 80, 100]
    remote = backend.client.request("GET", f"/v1/budgets/{state['id']}").body
    assert (remote["amount_usd"], remote["label_filter"], remote["alerts"]) == (
        "1500.000000",
        {"key": "team", "value": "nlp"},
        [],
    )

    tf.write_main(budget_config("2000.25", 'thresholds = [90, 100]\n      action = "block_new"'))
    code, output = plan_text(tf)
    assert code == 2 and "1 to change, 0 to destroy" in output, output
    apply_and_check(tf)
    assert values(tf, ADDRESS)["id"] == state["id"]
    remote = backend.client.request("GET", f"/v1/budgets/{state['id']}").body
    assert (remote["amount_usd"], remote["thresholds"], remote["action"]) == (
        "2000.250000",
        [90, 100],
        "block_new",
    )

    import_verify(tf, ADDRESS)

    tf.write_main(budget_config("10.001"))
    assert "amount_usd" in plan_error(tf)

    tf.write_main(budget_config("2000.25", 'thresholds = [90, 100]\n      action = "block_new"'))
    tf.destroy()
    try:
        backend.client.request("GET", f"/v1/budgets/{state['id']}")
    except NotFound:
        return
    raise AssertionError("the budget is still there after destroy")
