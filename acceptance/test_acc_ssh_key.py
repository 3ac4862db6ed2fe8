"""gpucloud_ssh_key against the real backend, real provider launch path and Terraform 1.11."""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from acceptance.backend import Backend
from acceptance.gpucloud_steps import (
    PROVIDER_BLOCK,
    GpuCloudTerraform,
    apply_and_check,
    backend,
    gpucloud_tf,
    import_verify,
    new_public_key,
    plan_error,
    plan_text,
    values,
    write_text,
)
from acceptance.harness import TerraformFactory
from tests.contract.private_keys import FORMS, private_key, secret_lines

__all__ = ["backend", "gpucloud_tf"]  # fixtures used by the tests below

ADDRESS = "gpucloud_ssh_key.deploy"


def key_config(name: str, public_key_expr: str = 'file("${path.module}/key.pub")') -> str:
    return f"""
    resource "gpucloud_ssh_key" "deploy" {{
      name       = "{name}"
      public_key = {public_key_expr}
    }}
    """


def test_acc_ssh_key_lifecycle(gpucloud_tf: GpuCloudTerraform, backend: Backend) -> None:
    tf = gpucloud_tf(key_config("deploy"))
    public_key = new_public_key()
    write_text(tf, "key.pub", public_key + "\n")  # as ssh-keygen writes it: with a newline
    apply_and_check(tf)
    state = values(tf, ADDRESS)
    remote = backend.client.get_ssh_key(state["id"])
    assert remote["name"] == "deploy" and remote["fingerprint"] == state["fingerprint"]
    assert state["key_type"] == "ssh-ed25519" and state["created_at"].endswith("Z")
    assert state["public_key"] == public_key + "\n"

    import_verify(tf, ADDRESS)

    # Whitespace only: no diff, no replacement.
    tf.write_main(key_config("deploy", f'"  {public_key.replace(" ", "   ")}  "'))
    assert plan_text(tf)[0] == 0

    # Rename: in place, same id.
    tf.write_main(key_config("deploy-renamed"))
    code, output = plan_text(tf)
    assert code == 2 and "1 to change, 0 to destroy" in output
    apply_and_check(tf)
    assert values(tf, ADDRESS)["id"] == state["id"]
    assert backend.client.get_ssh_key(state["id"])["name"] == "deploy-renamed"

    # Another key: replaced.
    write_text(tf, "key.pub", new_public_key() + "\n")
    code, output = plan_text(tf)
    assert code == 2 and "must be replaced" in output and "1 to add, 0 to change, 1 to destroy" in output
    apply_and_check(tf)
    new_id = values(tf, ADDRESS)["id"]
    assert new_id != state["id"]
    ids = {k["id"] for k in backend.client.list_ssh_keys()}
    assert new_id in ids and state["id"] not in ids

    tf.destroy()
    assert new_id not in {k["id"] for k in backend.client.list_ssh_keys()}


def test_acc_ssh_key_disappears_and_drift(gpucloud_tf: GpuCloudTerraform, backend: Backend) -> None:
    tf = gpucloud_tf(key_config("drifty"))
    write_text(tf, "key.pub", new_public_key())
    apply_and_check(tf)
    key_id = values(tf, ADDRESS)["id"]

    backend.client.update_ssh_key(key_id, name="renamed-by-hand")  # drift
    code, output = plan_text(tf)
    assert code == 2 and '"renamed-by-hand" -> "drifty"' in output
    apply_and_check(tf)
    assert backend.client.get_ssh_key(key_id)["name"] == "drifty"

    backend.client.delete_ssh_key(key_id)  # disappears
    code, output = plan_text(tf)
    assert code == 2 and "will be created" in output
    apply_and_check(tf)
    assert values(tf, ADDRESS)["id"] != key_id
    tf.destroy()
    assert backend.client.list_ssh_keys(name="drifty") == []


def test_acc_ssh_key_invalid_configurations_fail_at_plan(gpucloud_tf: GpuCloudTerraform) -> None:
    tf = gpucloud_tf(key_config("", '"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA"'))
    output = plan_error(tf)
    assert "Attribute name must be 1-128 printable characters" in output

    tf.write_main(key_config("ok", '"ssh-dss AAAAB3NzaC1kc3MAAACBAP"'))
    output = plan_error(tf)
    assert "Unsupported SSH Key Type" in output and "public_key must be an OpenSSH public key" in output

    tf.write_main(key_config("ok", '"ssh-ed25519 not-base64!"'))
    output = plan_error(tf)
    assert "Invalid SSH Public Key" in output and "public_key must be '<type> <base64 key data>" in output


def test_acc_ssh_key_duplicate_names_the_existing_key(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    public_key = new_public_key()
    existing = backend.client.create_ssh_key(name="by-hand", public_key=public_key, idempotency_key="dup-1")
    tf = gpucloud_tf(key_config("again"))
    write_text(tf, "key.pub", public_key)
    result = tf.apply(check=False)
    assert result.returncode == 1
    assert "SSH Key Already Registered" in result.output and existing["id"] in result.output
    assert tf.run("state", "list", check=False).stdout.strip() == ""
    backend.client.delete_ssh_key(existing["id"])


def test_acc_ssh_key_import_block_generates_config_that_plans_clean(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    existing = backend.client.create_ssh_key(
        name="generated", public_key=new_public_key() + "\n", idempotency_key="gen-1"
    )
    tf = gpucloud_tf(f'import {{\n  to = {ADDRESS}\n  id = "{existing["id"]}"\n}}\n')
    tf.plan("-generate-config-out=generated.tf")
    generated = (tf.workdir / "generated.tf").read_text()
    assert 'name       = "generated"' in generated and "fingerprint" not in generated
    tf.apply()
    assert values(tf, ADDRESS)["id"] == existing["id"]
    tf.assert_plan_empty()
    tf.destroy()
    assert existing["id"] not in {k["id"] for k in backend.client.list_ssh_keys()}


def test_acc_ssh_key_private_or_weak_key_fails_plan_without_echoing_it(
    terraform: TerraformFactory, backend: Backend, tf_version: str
) -> None:
    """`public_key = file("id_ed25519")` (the private key) is named once per key, in every form, and no
    line of it reaches the output, the provider's trace logs included; an RSA-1024 key fails the plan."""
    tf = terraform(tf_version)
    tf.env.update(backend.provider_env, TF_LOG_PROVIDER="TRACE")
    tf.write("provider.tf", PROVIDER_BLOCK)
    secrets: list[str] = []
    blocks = []
    for kind, form in FORMS:
        text = private_key(kind, form)
        secrets += secret_lines(text)
        write_text(tf, f"id_{kind}_{form}", text)
        blocks.append(key_config(f"{kind}-{form}", f'file("${{path.module}}/id_{kind}_{form}")')
                      .replace('"deploy"', f'"{kind}_{form}"'))
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()
    write_text(tf, "weak.pub", weak.public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode() + "\n")
    blocks.append(key_config("weak", 'file("${path.module}/weak.pub")').replace('"deploy"', '"weak"'))
    tf.write_main("\n".join(blocks))
    tf.init()
    before = backend.client.list_ssh_keys()

    result = tf.plan(check=False)
    assert result.returncode == 1, result.output
    errors = result.output.split("Error: ")[1:]
    for kind, form in FORMS:
        named = [e for e in errors if f"with gpucloud_ssh_key.{kind}_{form}," in e]
        assert len(named) == 1 and named[0].startswith("Private Key Instead Of Public Key"), named
        assert ".pub file" in " ".join(named[0].split())
    (weak_error,) = [e for e in errors if "with gpucloud_ssh_key.weak," in e]
    assert weak_error.startswith("SSH Key Too Weak") and "2048 bits" in weak_error
    assert "BEGIN" not in result.output
    assert not [line for line in secrets if line[:16] in result.output]
    assert backend.client.list_ssh_keys() == before
