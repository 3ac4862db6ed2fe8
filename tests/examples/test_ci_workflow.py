"""examples/ci/github-actions.yml against docs/guides/ci.md: each job gets an API key of the role the guide
names (the backend's role rules are checked end to end in acceptance/test_acc_workflows_ci.py), and
every job installs the provider alone, without the backend's extra."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
WORKFLOW: dict[str, Any] = yaml.safe_load((REPO / "examples" / "ci" / "github-actions.yml").read_text())
GUIDE = (REPO / "docs" / "guides" / "ci.md").read_text()
ROLE_OF_SECRET = {"GPUCLOUD_MEMBER_API_KEY": "member", "GPUCLOUD_ADMIN_API_KEY": "admin"}


def _guide_roles() -> dict[str, str]:
    """job -> role, from the guide's table of jobs (`| job | when | API key | ...`)."""
    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| `(\w+)` \|", GUIDE, re.MULTILINE)
    return dict(rows)


def _workflow_role(job: dict[str, Any]) -> str:
    match = re.fullmatch(r"\$\{\{ secrets\.(\w+) \}\}", job["env"]["GPUCLOUD_API_KEY"])
    assert match is not None, job["env"]
    return ROLE_OF_SECRET[match.group(1)]


def test_ci_workflow_gives_each_job_the_key_role_the_guide_names() -> None:
    assert _guide_roles() == {"plan": "member", "apply": "admin", "drift": "member"}
    assert "GPUCLOUD_API_KEY" not in WORKFLOW["env"]  # no key shared by every job
    jobs = WORKFLOW["jobs"]
    assert {name: _workflow_role(job) for name, job in jobs.items()} == _guide_roles()
    assert jobs["apply"]["environment"] == "production"  # the admin key is that environment's secret


def test_ci_workflow_installs_the_provider_without_the_backend() -> None:
    package = Requirement(WORKFLOW["env"]["GPUCLOUD_PACKAGE"])
    assert package.name == "gpucloud" and not package.extras and str(package.specifier).startswith("==")
    for name, job in WORKFLOW["jobs"].items():
        installs = [step["run"] for step in job["steps"] if "pip" in step.get("run", "")]
        assert installs and all('install --quiet "$GPUCLOUD_PACKAGE"' in run for run in installs), name
