"""The web console's serving (`/console`): the shell and every module with their content types and
security headers, nothing outside static/, and static checks that keep the modules safe under the CSP
(no inline script or style, no HTML parsing of data, imports that resolve). The browser drives it in
acceptance/test_acc_console.py."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from backend.api.console import CONTENT_SECURITY_POLICY, MEDIA_TYPES
from backend.console import STATIC_DIR

STATIC_FILES = sorted(p for p in STATIC_DIR.rglob("*") if p.is_file())
MODULES = [p for p in STATIC_FILES if p.suffix == ".js"]


@pytest.fixture
def database_url(sqlite_template: Path, tmp_path: Path) -> str:
    """The console serves files only: one store (SQLite) is enough."""
    path = tmp_path / "gpucloud.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


def _assert_secure_headers(headers: Mapping[str, str]) -> None:
    csp = headers["content-security-policy"]
    directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert directives["default-src"] == "'self'" and directives["object-src"] == "'none'"
    assert directives["frame-ancestors"] == "'none'" and directives["base-uri"] == "'none'"
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"


@pytest.mark.parametrize("path", ["/console", "/console/"])
def test_console_serves_the_shell_with_a_strict_csp(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert '<script type="module" src="/console/static/js/app.js"></script>' in response.text
    _assert_secure_headers(response.headers)
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY


def test_console_serves_every_static_file_with_its_content_type(client: TestClient) -> None:
    assert len(MODULES) >= 15
    for path in STATIC_FILES:
        url = f"/console/static/{path.relative_to(STATIC_DIR).as_posix()}"
        response = client.get(url)
        assert response.status_code == 200, url
        assert response.headers["content-type"] == MEDIA_TYPES[path.suffix], url
        assert response.content == path.read_bytes()
        _assert_secure_headers(response.headers)


def test_console_revalidates_with_etags(client: TestClient) -> None:
    first = client.get("/console/static/js/app.js")
    again = client.get("/console/static/js/app.js", headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    assert "content-security-policy" in again.headers


@pytest.mark.parametrize(
    "path",
    [
        "/console/static/../../api/console.py",
        "/console/static/%2e%2e/__init__.py",
        "/console/static/..%2f__init__.py",
        "/console/static/js/missing.js",
        "/console/static/js",
        "/console/static/",
    ],
)
def test_console_serves_nothing_outside_its_static_files(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert "def " not in response.text


def test_console_is_not_part_of_the_api_contract(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p.startswith("/console")]


def test_console_shell_runs_its_start_watch_before_and_apart_from_the_modules() -> None:
    # Not deferred and not a module: it must run even when the modules never load (start-watch.js).
    html = (STATIC_DIR / "index.html").read_text()
    watch = '<script src="/console/static/js/start-watch.js"></script>'
    assert watch in html and html.index(watch) < html.index('<script type="module"')
    app = (STATIC_DIR / "js" / "app.js").read_text()
    assert 'setAttribute("data-console-started", "")' in app
    assert 'removeItem("gpucloud.consoleReloaded")' in app


def test_console_shell_has_no_inline_script_style_or_handler() -> None:
    html = (STATIC_DIR / "index.html").read_text()
    scripts = re.findall(r"<script\b[^>]*>(.*?)</script>", html, flags=re.S)
    assert scripts and all(body.strip() == "" for body in scripts)
    assert all(" src=" in tag for tag in re.findall(r"<script\b[^>]*>", html))
    assert not re.search(r"\son[a-z]+\s*=", html) and "<style" not in html and " style=" not in html


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.relative_to(STATIC_DIR).as_posix())
def test_console_module_never_parses_data_as_html(module: Path) -> None:
    source = module.read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
                 "setAttribute(\"style\"", "document.cookie", "localStorage.setItem(\"gpucloud.apiKey"):
        assert sink not in source, f"{module.name} uses {sink}"


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.relative_to(STATIC_DIR).as_posix())
def test_console_module_imports_resolve(module: Path) -> None:
    for target in re.findall(r'^import .* from "(\.[^"]+)";$', module.read_text(), flags=re.M):
        assert (module.parent / target).resolve().is_file(), f"{module.name} imports missing {target}"


def test_console_key_lives_in_session_storage_and_requests_carry_it() -> None:
    api = (STATIC_DIR / "js" / "api.js").read_text()
    assert 'sessionStorage.setItem(KEY_NAME, key)' in api
    assert 'headers.Authorization = `Bearer ${token}`' in api
    assert 'credentials: "omit"' in api  # and no cookie is ever sent or read


def test_console_request_log_never_holds_the_api_key(
    admin: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    key = admin.headers["authorization"].removeprefix("Bearer ")
    capsys.readouterr()
    admin.get("/console")
    admin.get("/v1/clusters", params={"page_size": 1})
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    requests = [line for line in lines if line.get("event") == "request"]
    assert {line["path"] for line in requests} == {"/console", "/v1/clusters"}
    assert key not in json.dumps(lines) and key[4:] not in json.dumps(lines)
