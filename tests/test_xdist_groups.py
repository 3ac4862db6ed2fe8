"""How the root conftest.py shares test files out between pytest-xdist workers (its scheduler hook)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import xdist_group

REPO = Path(__file__).resolve().parent.parent
# What a test file that makes real nodes contains: a backend started on the local driver, a LocalCluster,
# or a look at the host's network namespaces.
REAL_NODES = re.compile(r'GPUCLOUD_DRIVER"?[:=] *"local"|LocalCluster\(|"ip", "netns"')


def _test_files() -> list[str]:
    """Every test file but this one (whose pattern would match itself)."""
    found = [*REPO.glob("acceptance/**/test_*.py"), *REPO.glob("tests/**/test_*.py")]
    return sorted(str(path.relative_to(REPO)) for path in found if path != Path(__file__).resolve())


def _makes_real_nodes(path: str) -> bool:
    return bool(REAL_NODES.search((REPO / path).read_text()))


def test_every_file_that_makes_real_nodes_runs_in_the_one_local_driver_group() -> None:
    # They share the host's namespaces, bridges, /var/tmp trees and daemons, so they run one at a time.
    real = [path for path in _test_files() if _makes_real_nodes(path)]
    assert {"acceptance/test_acc_local_driver.py", "acceptance/test_acc_local_isolation.py"} <= set(real)
    assert {path: xdist_group(path) for path in real} == dict.fromkeys(real, "local-driver")


def test_every_file_that_builds_provider_packages_runs_in_one_group() -> None:
    # signed_packages fills the pip cache build/provider-wheels: two workers would write it at once.
    building = [path for path in _test_files() if "signed_packages(" in (REPO / path).read_text()]
    assert {"acceptance/test_acc_registry_install.py", "acceptance/test_acc_workflows_ci.py"} <= set(building)
    assert {path: xdist_group(path) for path in building} == dict.fromkeys(building, "provider-packages")


def test_the_acceptance_files_of_the_local_driver_and_its_unit_tests_share_the_group() -> None:
    for path in ("acceptance/test_acc_local_isolation.py", "acceptance/test_acc_local_driver.py",
                 "tests/backend/local/test_local_jobs.py"):
        assert xdist_group(path) == "local-driver", path


def test_any_other_file_is_a_group_of_its_own() -> None:
    # One worker per file: a module's backend and Terraform directories are set up once.
    for path in ("acceptance/test_acc_gpu_cluster_faults.py", "tests/backend/test_runtime.py"):
        assert xdist_group(path) == path
