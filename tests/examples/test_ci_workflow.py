"""examples/ci/github-actions.yml against docs/guides/ci.md: each job gets an API key of the role the guide
names (the backend's role rules are checked end to end in acceptance/test_acc_workflows_ci.py), and no
job installs anything of ours: terraform-ci.sh installs the provider from the backend's network mirror."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

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


def test_ci_workflow_installs_the_provider_from_the_backend_mirror_only() -> None:
    assert WORKFLOW["env"]["GPUCLOUD_ENDPOINT"] == "${{ vars.GPUCLOUD_ENDPOINT }}"  # the mirror's host
    for name, job in WORKFLOW["jobs"].items():
        runs = [step.get("run", "") for step in job["steps"]]
        assert not any(re.search(r"\bpip\b|venv|--mirror", run) for run in runs), name
        assert any("examples/ci/terraform-ci.sh" in run for run in runs), name
