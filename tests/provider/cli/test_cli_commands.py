"""The command tree: help with an example everywhere, docs/cli.md fresh, shell completion, the
configuration file, and the provider's start-up staying free of the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from provider.cli import config, docs
from provider.cli.main import cli, main

REPO = Path(__file__).resolve().parents[3]


def _leaves(command: click.Command, path: tuple[str, ...] = ("gpucloud",)) -> Iterator[tuple[str, ...]]:
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _leaves(sub, (*path, name))
    else:
        yield path


def test_cli_every_command_has_help_with_an_example_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    leaves = list(_leaves(cli))
    assert len(leaves) >= 24
    for path in leaves:
        assert main([*path[1:], "--help"]) == 0
        text = capsys.readouterr().out
        assert "Example" in text, path
        if path[-1] not in ("completion", "ssh"):  # ssh execs ssh; completion prints a script
            assert "--json" in text, path


def test_cli_docs_page_is_generated_from_the_real_help() -> None:
    committed = (REPO / "docs" / "cli.md").read_text()
    assert committed == docs.render(), "docs/cli.md is stale: run `bash scripts/generate.sh cli`"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_cli_completion_script_for_each_shell(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == 0
    assert "_GPUCLOUD_COMPLETE" in capsys.readouterr().out


def test_cli_usage_error_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "scale", "cls_1"]) == 1
    err = capsys.readouterr().err
    assert err == "error: Missing argument 'N'. (see `gpucloud cluster scale --help`)\n"


def test_cli_config_is_private_and_the_environment_overrides_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("GPUCLOUD_ENDPOINT", raising=False)
    monkeypatch.delenv("GPUCLOUD_API_KEY", raising=False)
    path = config.write_config("https://api.example/", 'gpc_"quoted\\key')
    assert path == tmp_path / "gpucloud" / "config.toml"
    assert path.stat().st_mode & 0o777 == 0o600
    assert tomllib.loads(path.read_text())["api_key"] == 'gpc_"quoted\\key'
    saved = config.resolve_credentials()
    assert (saved.endpoint, saved.api_key) == ("https://api.example", 'gpc_"quoted\\key')
    monkeypatch.setenv("GPUCLOUD_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("GPUCLOUD_API_KEY", "gpc_env")
    from_env = config.resolve_credentials()
    assert (from_env.endpoint, from_env.api_key, from_env.endpoint_from) == (
        "http://127.0.0.1:9", "gpc_env", "GPUCLOUD_ENDPOINT"
    )


def test_cli_missing_api_key_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("GPUCLOUD_API_KEY", raising=False)
    assert main(["cluster", "list"]) == 1
    assert "run `gpucloud login` or set GPUCLOUD_API_KEY" in capsys.readouterr().err


def test_cli_is_a_console_script_of_the_provider_install() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["gpucloud"] == "provider.cli.main:main"


def test_cli_is_not_loaded_when_the_plugin_starts() -> None:
    # Terraform launches the plugin for every plan: it must not pay for Click or Rich.
    probe = (
        "import sys, provider.plugin.main\n"
        "print(sorted(m for m in ('click', 'rich', 'provider.cli') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.strip() == "[]"
