"""The node agent runs on each server's own `python3`, not the backend's: Ubuntu 20.04 has 3.8, Debian 11
3.9, Ubuntu 22.04 3.10. Its code must keep to what 3.8 has (docs/guides/own-hosts.md promises it);
vermin reads which Python each construct and library call needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from backend import node_agent

OLDEST_SERVER_PYTHON = "3.8"
AGENT = Path(node_agent.__file__).parent


def test_the_agent_runs_on_the_oldest_python_a_server_may_have() -> None:
    modules = sorted(AGENT.glob("*.py"))
    # Annotations stay strings (3.9's `list[int]` is then fine on 3.8) only with the future import.
    assert [m.name for m in modules if "from __future__ import annotations" not in m.read_text()] == [
        "__init__.py"
    ]
    vermin = str(Path(sys.executable).with_name("vermin"))
    done = subprocess.run(
        [vermin, "--no-tips", "--violations", f"-t={OLDEST_SERVER_PYTHON}-", *map(str, modules)],
        capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
