"""How pytest-xdist shares the suite out between workers (`make test` runs `-n $(TEST_WORKERS)`; the scheduler
is `pytest_xdist_make_scheduler` below).

Each test file stays on one worker, so module-scoped backends and Terraform working directories are
set up once. Files that share something fixed on the host form one group, run one after another:
- local-driver: the files that make real nodes (network namespaces, bridges, Slurm daemons and /var/tmp
  trees on the host; their timing assumes they run one at a time);
- provider-packages: the files that build signed provider packages (`signed_packages`), whose pip
  download cache build/provider-wheels two workers would fill at once; together they also build once.
"""

from __future__ import annotations

from typing import Any

import pytest

# Group -> path prefixes (relative to the repository root).
SHARED_GROUPS = {
    "local-driver": ("tests/backend/local/", "acceptance/test_acc_local_"),
    "provider-packages": ("acceptance/test_acc_registry_install.py", "acceptance/test_acc_workflows_ci.py"),
}


def xdist_group(path: str) -> str:
    """The pytest-xdist group of the test file at `path` (relative to the repository root)."""
    return next((group for group, prefixes in SHARED_GROUPS.items() if path.startswith(prefixes)), path)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Whole groups to one worker: pytest-xdist's own `--dist loadgroup` reads markers into node ids,
    which pytest 9 no longer lets it change, so it spread every file over both workers."""
    from xdist.scheduler import LoadScopeScheduling

    class SharedGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid.split("::", 1)[0])

    return SharedGroupScheduling(config, log)
