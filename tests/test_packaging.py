"""What `pip install gpucloud` brings: the provider's dependencies and nothing of the backend's stack.

The dependency lists in pyproject.toml are checked against what provider/ and backend/ import (an AST
walk, mapped to distributions through the installed metadata), and the provider is launched as Terraform
launches it with every backend-only package hidden.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from functools import cache
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from provider._proto import tfplugin6_pb2, tfplugin6_pb2_grpc
from tests.provider.plugin.launching import REPO, launched, make_client_certificate, terraform_environment

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
BASE = PYPROJECT["dependencies"]
EXTRAS = PYPROJECT["optional-dependencies"]
# Loaded by SQLAlchemy for `postgresql+psycopg://` URLs, never imported by name.
LOADED_BY_NAME_ONLY = {"psycopg"}


def _names(requirements: Iterable[str]) -> set[str]:
    return {canonicalize_name(Requirement(text).name) for text in requirements}


# gRPC client stubs, for tests and tools that talk to a provider: the provider itself never imports them
# and serves without grpcio (provider/plugin/http2.py), so they do not make grpcio a dependency.
CLIENT_STUBS = "_pb2_grpc.py"


def _imported_distributions(package: str) -> set[str]:
    """Distributions of the third-party modules that `package` imports anywhere (lazy imports too)."""
    modules: set[str] = set()
    for path in (REPO / package).rglob("*.py"):
        if path.name.endswith(CLIENT_STUBS):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules.update(alias.name.partition(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.partition(".")[0])
    owners = metadata.packages_distributions()
    third_party = modules - set(sys.stdlib_module_names) - {"provider", "backend"}
    unknown = sorted(m for m in third_party if m not in owners)
    assert not unknown, f"{package}/ imports modules no installed distribution provides: {unknown}"
    return {canonicalize_name(dist) for module in third_party for dist in owners[module]}


def _closure(requirements: Iterable[str]) -> set[str]:
    """Every distribution that installing `requirements` installs (from the installed metadata)."""
    found: set[str] = set()
    todo = [Requirement(text) for text in requirements]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if (name, frozenset(requirement.extras)) in seen:
            continue
        seen.add((name, frozenset(requirement.extras)))
        found.add(name)
        try:
            needs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # a platform-specific dependency this machine does not install
        for text in needs:
            need = Requirement(text)
            if need.marker is None or any(
                need.marker.evaluate({"extra": extra}) for extra in (*requirement.extras, "")
            ):
                todo.append(need)
    return found


@cache
def _backend_only_modules() -> tuple[str, ...]:
    """Top-level modules that only the `backend` extra installs (what a provider-only install lacks)."""
    backend_only = _closure(EXTRAS["backend"]) - _closure(BASE)
    owners = metadata.packages_distributions()
    return tuple(sorted(
        module for module, dists in owners.items()
        if {canonicalize_name(d) for d in dists} <= backend_only and not module.startswith("_")
    ))


def _hiding(modules: Iterable[str], then: str) -> str:
    """Python source that makes `modules` unimportable (as if not installed), then runs `then`."""
    return (
        "import sys\n"
        f"HIDDEN = {set(modules)!r}\n"
        "class Hidden:\n"
        "    @staticmethod\n"
        "    def find_spec(name, path=None, target=None):\n"
        "        if name.partition('.')[0] in HIDDEN:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Hidden)\n"
        f"{then}\n"
    )


def test_packaging_base_dependencies_are_exactly_what_the_provider_imports() -> None:
    assert _names(BASE) == _imported_distributions("provider")


def test_packaging_backend_extra_covers_what_the_backend_imports() -> None:
    backend = _names(EXTRAS["backend"])
    assert _imported_distributions("backend") <= _closure([*BASE, *EXTRAS["backend"]])
    assert backend - LOADED_BY_NAME_ONLY <= _imported_distributions("backend"), "unused backend dependency"
    assert not backend & _names(BASE), "a backend dependency is also a base one"


def test_packaging_dev_extra_installs_the_backend() -> None:
    # `make venv` installs '.[dev]': the tests run the real backend.
    assert "gpucloud[backend]" in EXTRAS["dev"]


def test_packaging_provider_serves_its_schemas_without_the_backend_stack_or_grpcio() -> None:
    hidden = (*_backend_only_modules(), "grpc")
    assert {"fastapi", "sqlalchemy", "uvicorn", "alembic", "pydantic", "cryptography"} <= set(hidden)
    cert = make_client_certificate()
    command = [sys.executable, "-c", _hiding(hidden, "from provider.plugin.main import main; main()")]
    with launched(command, terraform_environment(cert), cwd=REPO) as plugin, plugin.channel(cert) as channel:
        schemas = tfplugin6_pb2_grpc.ProviderStub(channel).GetProviderSchema(
            tfplugin6_pb2.GetProviderSchema.Request(), timeout=30
        )
    assert not schemas.diagnostics
    resources = {"gpucloud_gpu_cluster", "gpucloud_shared_volume", "gpucloud_ssh_key"}
    assert resources <= set(schemas.resource_schemas)
    assert "gpucloud_cluster_credentials" in schemas.ephemeral_resource_schemas


def test_packaging_backend_cli_without_the_backend_stack_names_the_extra(tmp_path: Path) -> None:
    run = "from backend.cli import main; sys.exit(main(['create-project', 'acme']))"
    done = subprocess.run(
        [sys.executable, "-c", _hiding(_backend_only_modules(), run)],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "GPUCLOUD_DATA_DIR": str(tmp_path)},
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 1 and done.stdout == "", done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "the backend's dependencies are not installed" in done.stderr
    assert "pip install 'gpucloud[backend]'" in done.stderr
