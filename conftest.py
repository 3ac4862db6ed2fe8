"""How pytest-xdist shares the suite out between workers (`make test` runs `-n 2 --dist loadgroup`).

Each test file stays on one worker, so module-scoped backends and Terraform working directories are
set up once. The files that make real nodes (network namespaces, bridges, Slurm daemons on the host)
form one group: they share host-wide resources and their timing assumes they run one at a time.
"""

from __future__ import annotations

import pytest

LOCAL_DRIVER_FILES = ("tests/backend/local/", "acceptance/test_acc_local_driver.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        group = "local-driver" if path.startswith(LOCAL_DRIVER_FILES) else path
        item.add_marker(pytest.mark.xdist_group(group))
