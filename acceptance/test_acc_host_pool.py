"""gpucloud_host_pool against the real backend (its engine worker checking hosts over SSH), the real
provider launch path and Terraform 1.11: a pool of two hosts nobody listens on, its key given write-only.
The apply does not wait for the checks; a refresh then shows each host unreachable with the reason, and
the state never holds the key. Renaming and adding a host change it in place, a new key version sends a
new key, an import brings everything back but the key (the next apply sends it), destroy removes it."""

from __future__ import annotations

import subprocess
from typing import Any

from acceptance.backend import Backend
from acceptance.gpucloud_steps import (
    GpuCloudTerraform,
    apply_and_check,
    backend,
    gpucloud_tf,
    plan_error,
    plan_text,
    values,
)
from acceptance.harness import Terraform
from acceptance.harness.waiting import wait_until

__all__ = ["backend", "gpucloud_tf"]  # fixtures used by the test below

ADDRESS = "gpucloud_host_pool.lab"
CLOSED_PORTS = (1, 9)  # nothing listens there: every check ends "unreachable"
# What the engine's checks change between two reads.
CHECKED = ("status", "ready_hosts", "free_hosts", "host_status")


def pool_config(name: str, ports: tuple[int, ...], key_file: str | None, version: int) -> str:
    """The pool at 127.0.0.1 `ports`, its key read from `key_file` (None: no key at all)."""
    hosts = ", ".join(f'{{ address = "127.0.0.1", port = {port} }}' for port in ports)
    key = f'ssh_private_key_wo = file("${{path.module}}/{key_file}")' if key_file else ""
    return f"""
    resource "gpucloud_host_pool" "lab" {{
      name                       = "{name}"
      region                     = "on-prem-test"
      hosts                      = [{hosts}]
      {key}
      ssh_private_key_wo_version = {version}
    }}
    """


def new_private_key(tf: Terraform, name: str) -> str:
    """An unencrypted ed25519 key made by ssh-keygen next to the configuration; its text."""
    path = tf.workdir / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "acc", "-f", str(path)], check=True)
    return path.read_text()


def key_material(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("-----")]


def stored_state(tf: Terraform) -> str:
    return (tf.workdir / "terraform.tfstate").read_text()


def api_pool(backend: Backend, pool_id: str) -> dict[str, Any]:
    body: dict[str, Any] = backend.client.request("GET", f"/v1/host-pools/{pool_id}").body
    return body


def test_acc_host_pool_lifecycle_with_a_write_only_key(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    tf = gpucloud_tf(pool_config("lab", CLOSED_PORTS, None, 1))
    output = plan_error(tf)
    assert "Exactly one of these attributes must be set: ssh_private_key, ssh_private_key_wo" in output

    first_key = new_private_key(tf, "key1")
    tf.write_main(pool_config("lab", CLOSED_PORTS, "key1", 1))
    apply_and_check(tf)
    pool = values(tf, ADDRESS)
    assert pool["ssh_private_key_wo"] is None and pool["ssh_private_key"] is None
    assert pool["ssh_public_key"].startswith("ssh-ed25519 ")
    assert pool["hosts"] == [{"address": "127.0.0.1", "port": p, "host_key": None} for p in CLOSED_PORTS]

    # The checks run in the engine worker after the apply; a refresh shows what they found.
    def checked() -> bool:
        return all(h["status"] == "unreachable" for h in api_pool(backend, pool["id"])["hosts"])

    wait_until(checked, lambda: str(api_pool(backend, pool["id"])["hosts"]), seconds=60)
    tf.apply("-refresh-only")
    refreshed = values(tf, ADDRESS)
    assert refreshed["status"] == "unavailable" and refreshed["ready_hosts"] == 0
    for status, port in zip(refreshed["host_status"], CLOSED_PORTS, strict=True):
        assert (status["port"], status["status"]) == (port, "unreachable")
        assert status["reason_code"] == "unreachable"
        assert status["reason"] and status["checked_at"]
    tf.assert_plan_empty()
    assert not any(line in stored_state(tf) for line in key_material(first_key))

    # Rename and one more host: in place, the same pool.
    tf.write_main(pool_config("lab-2", (*CLOSED_PORTS, 7), "key1", 1))
    code, output = plan_text(tf)
    assert code == 2 and "1 to change, 0 to destroy" in output
    apply_and_check(tf)
    remote = api_pool(backend, pool["id"])
    assert remote["name"] == "lab-2" and [h["port"] for h in remote["hosts"]] == [*CLOSED_PORTS, 7]
    assert values(tf, ADDRESS)["id"] == pool["id"]

    # A new key, sent because its version changed.
    second_key = new_private_key(tf, "key2")
    tf.write_main(pool_config("lab-2", (*CLOSED_PORTS, 7), "key2", 2))
    apply_and_check(tf)
    rotated = values(tf, ADDRESS)
    assert rotated["ssh_key_fingerprint"] != pool["ssh_key_fingerprint"]
    assert api_pool(backend, pool["id"])["ssh_key_fingerprint"] == rotated["ssh_key_fingerprint"]
    state_text = stored_state(tf)
    assert not any(line in state_text for line in key_material(first_key) + key_material(second_key))

    # Import: everything but the key, which the next apply sends again (same key: nothing changes remotely).
    tf.run("state", "rm", ADDRESS)
    tf.import_(ADDRESS, pool["id"])
    imported = values(tf, ADDRESS)
    assert imported["ssh_private_key_wo_version"] is None
    kept = [k for k in rotated if k not in (*CHECKED, "ssh_private_key_wo_version")]
    assert {k: imported[k] for k in kept} == {k: rotated[k] for k in kept}
    code, output = plan_text(tf)
    assert code == 2 and "1 to change" in output
    apply_and_check(tf)
    assert values(tf, ADDRESS)["ssh_key_fingerprint"] == rotated["ssh_key_fingerprint"]

    tf.destroy()
    assert backend.client.request("GET", "/v1/host-pools").body["items"] == []


def test_acc_host_pool_write_only_key_on_terraform_1_15(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    tf = gpucloud_tf("", version="1.15")
    key = new_private_key(tf, "key")
    tf.write_main(pool_config("lab-115", CLOSED_PORTS, "key", 1))
    apply_and_check(tf)
    assert values(tf, ADDRESS)["ssh_private_key_wo"] is None
    assert not any(line in stored_state(tf) for line in key_material(key))
    tf.destroy()
