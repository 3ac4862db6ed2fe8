"""How pytest-xdist shares the suite out between workers (`make test` runs `-n $(TEST_WORKERS) --dist
loadgroup`).

Each test file stays on one worker, so module-scoped backends and Terraform working directories are
set up once. Files that share something fixed on the host form one group, run one after another:
- local-driver: the files that make real nodes (network namespaces, bridges, Slurm daemons and /var/tmp
  trees on the host; their timing assumes they run one at a time);
- provider-packages: the files that build signed provider packages (`signed_packages`), whose pip
  download cache build/provider-wheels two workers would fill at once; together they also build once.
"""

from __future__ import annotations

import pytest

# Group -> path prefixes (relative to the repository root).
SHARED_GROUPS = {
    "local-driver": ("tests/backend/local/", "acceptance/test_acc_local_"),
    "provider-packages": ("acceptance/test_acc_registry_install.py", "acceptance/test_acc_workflows_ci.py"),
}


def xdist_group(path: str) -> str:
    """The pytest-xdist group of the test file at `path` (relative to the repository root)."""
    return next((group for group, prefixes in SHARED_GROUPS.items() if path.startswith(prefixes)), path)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.xdist_group(xdist_group(item.nodeid.split("::", 1)[0])))
