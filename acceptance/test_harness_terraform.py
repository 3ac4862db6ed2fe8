"""The acceptance harness itself, proven with Terraform's built-in `terraform_data` (no provider)."""

from __future__ import annotations

from pathlib import Path

import pytest

from acceptance.harness import (
    TerraformError,
    TerraformFactory,
    TerraformNotFound,
    find_terraform,
    write_cli_config,
)

CONFIG = """
    resource "terraform_data" "example" {
      input = var.greeting
    }

    variable "greeting" {
      type    = string
      default = "hello"
    }

    output "echo" {
      value = terraform_data.example.output
    }
"""

SLOW_APPLY = """
    resource "terraform_data" "slow" {
      input = "x"
      provisioner "local-exec" {
        command = "sleep 3600"
      }
    }
"""


def test_harness_resolves_the_pinned_terraform_releases() -> None:
    assert find_terraform("1.11").release == "1.11.4"
    assert find_terraform("1.15").release.startswith("1.15.")


def test_harness_missing_terraform_is_an_error_not_a_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    find_terraform.cache_clear()
    monkeypatch.setenv("PATH", "/nonexistent")
    try:
        with pytest.raises(TerraformNotFound, match="must be on PATH"):
            find_terraform("1.11")
    finally:
        find_terraform.cache_clear()  # the next caller resolves the real one again


def test_harness_lifecycle_on_each_version(terraform: TerraformFactory, tf_version: str) -> None:
    tf = terraform(tf_version, mirror=False)
    tf.write_main(CONFIG)
    tf.init()

    assert tf.plan_changes().returncode == 2
    applied = tf.apply()
    assert "Apply complete! Resources: 1 added, 0 changed, 0 destroyed." in applied.stdout
    tf.assert_plan_empty()
    assert tf.state_list() == ["terraform_data.example"]
    assert tf.output_json()["echo"]["value"] == "hello"
    state = tf.show_json()
    (resource,) = state["values"]["root_module"]["resources"]
    assert resource["values"]["input"] == "hello"

    changed = tf.plan_changes("-var", "greeting=bye")
    assert changed.returncode == 2
    assert "0 to add, 1 to change, 0 to destroy" in changed.stdout

    destroyed = tf.destroy()
    assert "Resources: 1 destroyed." in destroyed.stdout
    assert tf.state_list() == []


def test_harness_saved_plan_applies_and_shows(terraform: TerraformFactory) -> None:
    tf = terraform(mirror=False)
    tf.write_main(CONFIG)
    tf.init()
    tf.plan("-out=tfplan")
    planned = tf.show_json("tfplan")
    assert [change["address"] for change in planned["resource_changes"]] == ["terraform_data.example"]
    tf.apply(plan_file="tfplan")
    assert tf.state_list() == ["terraform_data.example"]


def test_harness_failure_raises_with_full_output(terraform: TerraformFactory) -> None:
    tf = terraform(mirror=False)
    tf.write_main('resource "terraform_data" "broken" {\n  input = undefined_thing\n}\n')
    tf.init()
    with pytest.raises(TerraformError) as raised:
        tf.plan()
    message = str(raised.value)
    assert "exit code 1" in message
    assert "undefined_thing" in message  # the diagnostic itself, from stderr
    assert raised.value.result.returncode == 1

    assert tf.plan(check=False).returncode == 1  # check=False returns instead


def test_harness_installs_gpucloud_providers_only_from_its_mirror(
    terraform: TerraformFactory, tmp_path: Path
) -> None:
    tf = terraform(mirror=False)
    empty_mirror = tmp_path / "empty-mirror"
    empty_mirror.mkdir()
    write_cli_config(tf.cli_config, empty_mirror)
    tf.write_main("""
        terraform {
          required_providers {
            absent = { source = "gpucloud/absent" }
          }
        }
    """)
    result = tf.init(check=False)
    assert result.returncode == 1
    assert str(empty_mirror) in result.output  # looked in the mirror, and nowhere else
    assert "registry.terraform.io/gpucloud/absent" in result.output


def test_harness_scrubs_inherited_terraform_settings(
    terraform: TerraformFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TF_PLUGIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TF_CLI_ARGS_plan", "-refresh=false")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    tf = terraform(mirror=False)
    assert "TF_PLUGIN_CACHE_DIR" not in tf.env
    assert "TF_CLI_ARGS_plan" not in tf.env
    assert "PYTHONDONTWRITEBYTECODE" not in tf.env  # providers run as on a user's machine
    assert tf.env["TF_IN_AUTOMATION"] == "1"
    assert tf.env["TF_CLI_CONFIG_FILE"] == str(tf.cli_config)
    assert tf.cli_config.parent != tf.workdir


def test_harness_ctrl_c_stops_a_running_apply(terraform: TerraformFactory, tf_version: str) -> None:
    tf = terraform(tf_version, mirror=False)
    tf.write_main(SLOW_APPLY)
    tf.init()
    running = tf.start("apply", "-auto-approve")
    try:
        running.wait_for_output(r"Provisioning with 'local-exec'")
        running.interrupt()
        result = running.wait()  # ends at all: the Ctrl-C stopped an apply that would take an hour
    finally:
        running.kill()
    assert result.returncode == 1
    # Terraform says it caught the interrupt, unless the provisioner's `sleep` (same process group)
    # died of it first and the apply failed on that before Terraform's own handler printed anything.
    assert "Interrupt received" in result.output or "signal: interrupt" in result.output


def test_harness_timeout_kills_the_command(terraform: TerraformFactory) -> None:
    tf = terraform(mirror=False)
    tf.write_main(SLOW_APPLY)
    tf.init()
    with pytest.raises(TerraformError, match="timed out after 2s"):
        tf.run("apply", "-auto-approve", timeout=2)
