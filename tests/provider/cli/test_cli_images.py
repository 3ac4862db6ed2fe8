"""Container images from the CLI against a scripted API: `cluster create --image/--registry-login` (passwords
only from the environment or a hidden prompt), `cluster images`, `cluster image set|remove` (waiting for the
import, failing with the image and the reason) and `cluster info`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from provider.cli import app as app_module
from provider.cli.images import human_size, image_lines, password_variable, short_digest
from provider.cli.main import main
from tests.provider.client.fakes import ScriptedApi, make_client

DIGEST_V3 = "sha256:" + "3" * 64
DIGEST_V4 = "sha256:" + "4" * 64
TRAIN_V3 = "registry.internal:5000/team/train:v3"
TRAIN_V4 = "registry.internal:5000/team/train:v4"
HOST = "registry.internal:5000"
NODES = [{"name": "train-0", "status": "RUNNING"}, {"name": "train-1", "status": "RUNNING"}]


def image(name: str, reference: str, state: str, digest: str | None = DIGEST_V3,
          reason: str | None = None) -> dict[str, Any]:
    return {"name": name, "reference": reference, "state": state, "digest": digest,
            "size_bytes": 734003200 if digest else None, "reason": reason,
            "updated_at": "2026-12-03T15:00:00Z"}


def cluster(*images: dict[str, Any], phase: str = "Ready", **extra: Any) -> dict[str, Any]:
    return {"id": "cls_1", "name": "train", "status": "RUNNING", "phase": phase, "node_count": 2,
            "instance_type": "8xH100", "region": "us-east-1", "nodes": NODES,
            "container_images": {i["name"]: i["reference"] for i in images}, "images": list(images),
            "image_storage_bytes": sum(i["size_bytes"] or 0 for i in images),
            "registry_credentials": {HOST: {"username": "ci"}}, **extra}


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ScriptedApi:
    scripted = ScriptedApi()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("GPUCLOUD_ENDPOINT", raising=False)
    monkeypatch.setenv("GPUCLOUD_API_KEY", "gpc_test")
    for variable in ("GPUCLOUD_REGISTRY_PASSWORD", password_variable(HOST)):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False, raising=False)
    monkeypatch.setattr(app_module, "GpuCloudClient", lambda *args, **kwargs: make_client(scripted))
    return scripted


def ok(body: Any, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json=body)


def page(*items: Any) -> httpx.Response:
    return ok({"items": list(items), "next_page_token": None})


def sent(api: ScriptedApi, method: str) -> list[Any]:
    return [b for r, b in zip(api.requests, api.bodies, strict=True) if r.method == method]


def test_create_sends_images_and_a_login_whose_password_comes_from_the_environment(
    api: ScriptedApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert password_variable(HOST) == "GPUCLOUD_REGISTRY_PASSWORD_REGISTRY_INTERNAL_5000"
    monkeypatch.setenv("GPUCLOUD_REGISTRY_PASSWORD", "shared")
    monkeypatch.setenv(password_variable(HOST), "s3cret")  # the host's own wins
    api.script = [page({"id": "ssh_1", "name": "laptop"}), ok(cluster(), 201)]
    assert main(["cluster", "create", "8xH100", "-n", "2", "--region", "us-east-1", "--image",
                 f"train={TRAIN_V3}", "--image", "base=ubuntu:22.04", "--registry-login", f"{HOST}=ci",
                 "--no-wait", "--json"]) == 0
    (body,) = sent(api, "POST")
    assert body["container_images"] == {"train": TRAIN_V3, "base": "ubuntu:22.04"}
    assert body["registry_credentials"] == {HOST: {"username": "ci", "password": "s3cret"}}
    assert "s3cret" not in " ".join(sys.argv)


def test_create_without_a_password_names_the_variable_and_sends_nothing(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["cluster", "create", "8xH100", "--region", "us-east-1", "--registry-login", f"{HOST}=ci"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "set GPUCLOUD_REGISTRY_PASSWORD_REGISTRY_INTERNAL_5000" in err
    assert "never taken from the command line" in err
    assert api.requests == []


def test_create_prompts_for_the_password_hidden_on_a_terminal(
    api: ScriptedApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    asked: list[dict[str, Any]] = []

    def prompt(text: str, **options: Any) -> str:
        asked.append({"text": text, **options})
        return "typed"

    monkeypatch.setattr("click.prompt", prompt)
    api.script = [page({"id": "ssh_1", "name": "laptop"}), ok(cluster(), 201)]
    assert main(["cluster", "create", "8xH100", "--region", "us-east-1", "--registry-login", f"{HOST}=ci",
                 "--no-wait", "--json"]) == 0
    assert asked[0]["hide_input"] is True and HOST in asked[0]["text"]
    assert sent(api, "POST")[0]["registry_credentials"][HOST]["password"] == "typed"


def test_images_lists_state_short_digest_size_and_reason(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    failed = image("train", TRAIN_V4, "failed", reason="manifest unknown: train:v4 not found")
    api.script = [page(cluster(image("base", "ubuntu:22.04", "ready"), failed))]
    assert main(["cluster", "images", "train"]) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert lines[0].split() == ["NAME", "STATE", "REFERENCE", "DIGEST", "SIZE", "REASON"]
    assert lines[1].split()[:5] == ["base", "READY", "ubuntu:22.04", short_digest(DIGEST_V3), "700.0"]
    assert "FAILED" in lines[2] and "manifest unknown: train:v4 not found" in lines[2]
    assert "Image storage: 1.4 GiB" in out.err


def test_image_set_merges_waits_and_reports_success(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    before = cluster(image("train", TRAIN_V3, "ready"))
    pending = cluster(image("train", TRAIN_V3, "ready"), image("base", "ubuntu:22.04", "pending", None),
                      phase="ImportingImages")
    done = cluster(image("train", TRAIN_V3, "ready"), image("base", "ubuntu:22.04", "ready", DIGEST_V4))
    api.script = [page(before), ok(pending), ok(done)]
    assert main(["cluster", "image", "set", "train", "base=ubuntu:22.04"]) == 0
    assert sent(api, "PATCH") == [{"container_images": {"train": TRAIN_V3, "base": "ubuntu:22.04"}}]
    assert "base" in capsys.readouterr().out


def test_image_set_that_fails_names_the_image_and_the_reason(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    before = cluster(image("train", TRAIN_V3, "ready"))
    failed = cluster(image("train", TRAIN_V4, "failed", reason="unauthorized: wrong password for ci"))
    api.script = [page(before), ok({**failed, "phase": "ImportingImages"}), ok(failed)]
    assert main(["cluster", "image", "set", "train", f"train={TRAIN_V4}"]) == 1
    err = capsys.readouterr().err
    assert f"train ({TRAIN_V4}): unauthorized: wrong password for ci" in err
    assert "the previous image (if any) stays in place" in err


def test_image_set_refuses_to_drop_another_registrys_login(
    api: ScriptedApi, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUCLOUD_REGISTRY_PASSWORD", "p")
    api.script = [page(cluster(image("train", TRAIN_V3, "ready")))]
    args = ["cluster", "image", "set", "train", "x=ghcr.io/org/x:1", "--registry-login", "ghcr.io=me"]
    assert main(args) == 1
    assert f"also logs in to {HOST}" in capsys.readouterr().err
    assert sent(api, "PATCH") == []


def test_image_remove_sends_the_rest_and_refuses_unknown_names(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    two = cluster(image("train", TRAIN_V3, "ready"), image("base", "ubuntu:22.04", "ready"))
    api.script = [page(two)]
    assert main(["cluster", "image", "remove", "train", "nope"]) == 1
    assert "nope: train has no such image (it has: base, train)" in capsys.readouterr().err
    api.script = [page(two), ok(cluster(image("train", TRAIN_V3, "ready")))]
    assert main(["cluster", "image", "remove", "train", "base"]) == 0
    assert sent(api, "PATCH") == [{"container_images": {"train": TRAIN_V3}}]


def test_info_shows_each_image_and_the_logins(api: ScriptedApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.script = [page(cluster(image("train", TRAIN_V3, "ready"))), page()]
    assert main(["cluster", "info", "train"]) == 0
    out = capsys.readouterr().out
    assert f"/images/train = {TRAIN_V3} (ready, {short_digest(DIGEST_V3)}, 700.0 MiB)" in out
    assert f"ci@{HOST}" in out


def test_info_says_a_failed_image_still_shows_the_previous_one() -> None:
    c = cluster(image("train", TRAIN_V4, "failed", reason="unauthorized"), image("new", TRAIN_V4, "failed",
                                                                                 None, "unauthorized"))
    assert image_lines(c) == [
        f"/images/train: {TRAIN_V4} failed (still {short_digest(DIGEST_V3)}, 700.0 MiB): unauthorized",
        f"/images/new: {TRAIN_V4} failed (nothing imported): unauthorized",
    ]


def test_sizes_and_digests_read_as_people_read_them() -> None:
    assert human_size(None) is None and human_size(512) == "512 B" and human_size(1536) == "1.5 KiB"
    assert short_digest(DIGEST_V3) == "sha256:333333333333" and short_digest(None) is None
