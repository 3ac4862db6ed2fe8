"""Installing a Python provider the way teams install providers: an unpacked filesystem mirror.

The mirror entry is `HOST/NS/TYPE/VERSION/OS_ARCH/terraform-provider-TYPE_vVERSION`, a small shell
script that execs this environment's Python on the provider's launch module. Terraform hashes that
package directory into `.terraform.lock.hcl` (`h1:`), so nothing may ever appear in it: the code lives
in the Python environment, never next to the launcher, and the launcher runs Python with `-I`
(isolated: neither Terraform's working directory nor PYTHON* variables reach the provider) and `-S`
(no `site` start-up cost; the import paths it would add are written into the launcher instead).

The launcher goes through `provider.plugin.warm_client`: a launch is handed to a pre-imported per-user
daemon when one runs (docs/plugin-tls.md, "Warm launches"), else served cold in the launcher itself.
The daemon's socket is named by a key of everything the script names (version, module, interpreter,
paths), so a launch of another version or environment never reaches that daemon.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import shlex
import sys
import sysconfig
from pathlib import Path

DEFAULT_HOSTNAME = "registry.terraform.io"

_GOARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "i386": "386",
    "i686": "386",
    "armv7l": "arm",
    "armv6l": "arm",
}


def terraform_platform() -> str:
    """This machine as Terraform names platforms, e.g. `linux_amd64`, `darwin_arm64`."""
    system = platform.system().lower()
    machine = platform.machine().lower()
    try:
        return f"{system}_{_GOARCH[machine]}"
    except KeyError:
        raise RuntimeError(f"no Terraform platform name known for machine type {machine!r}") from None


def _import_root(module: str) -> Path:
    """The sys.path entry from which `module` is imported here (its top-level package's parent)."""
    top = module.split(".", 1)[0]
    spec = importlib.util.find_spec(top)
    if spec is None:
        raise ValueError(f"launch module {module!r} is not importable")
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))).resolve().parent
    if spec.origin is None:
        raise ValueError(f"cannot locate launch module {module!r}")
    return Path(spec.origin).resolve().parent


def warm_key(launch_module: str, description: str, paths: list[str]) -> str:
    """Names the warm daemon that may serve this launcher: any difference means another daemon."""
    material = json.dumps([description, launch_module, sys.executable, paths])
    return hashlib.sha256(material.encode()).hexdigest()[:24]


def launcher_script(launch_module: str, *, description: str) -> str:
    """The executable Terraform runs: exec this interpreter on `launch_module.main()`."""
    try:
        found = importlib.util.find_spec(launch_module) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        raise ValueError(f"launch module {launch_module!r} is not importable")
    # `-S` skips site-packages' .pth files (editable installs among them), so name every root:
    # the launch module's, this package's (the plugin bridge it serves through), site-packages.
    roots = (_import_root(launch_module), _import_root(__name__))
    paths: list[str] = []
    for entry in (*map(str, roots), sysconfig.get_path("purelib"), sysconfig.get_path("platlib")):
        if entry not in paths:
            paths.append(entry)
    key = warm_key(launch_module, description, paths)
    code = (f"import sys; P = {json.dumps(paths)}; sys.path += P; from provider.plugin.warm_client import "
            f"launch; launch({json.dumps(launch_module)}, {json.dumps(key)}, P)")
    return (
        "#!/bin/sh\n"
        f"# {description}\n"
        "# Written by `install --mirror`; runs the provider from the Python environment named below.\n"
        f'exec {shlex.quote(sys.executable)} -I -S -c {shlex.quote(code)} "$@"\n'
    )


def write_mirror(
    mirror_dir: str | os.PathLike[str],
    *,
    namespace: str,
    type_name: str,
    version: str,
    launch_module: str,
    hostname: str = DEFAULT_HOSTNAME,
) -> Path:
    """Write (or rewrite identically) the unpacked mirror entry; returns the launcher's path."""
    content = launcher_script(launch_module, description=f"{hostname}/{namespace}/{type_name} {version}")
    package_dir = (
        Path(mirror_dir).resolve() / hostname / namespace / type_name / version / terraform_platform()
    )
    package_dir.mkdir(parents=True, exist_ok=True)
    launcher = package_dir / f"terraform-provider-{type_name}_v{version}"
    temporary = launcher.with_name(launcher.name + ".tmp")
    temporary.write_text(content, encoding="utf-8")
    temporary.chmod(0o755)
    temporary.replace(launcher)  # atomic: a concurrent `terraform init` never sees half a file
    return launcher


def _hcl_string(value: str) -> str:
    """A quoted HCL string; `${` and `%{` would start a template, so they are escaped too."""
    return json.dumps(value).replace("${", "$${").replace("%{", "%%{")


def cli_config_block(mirror_dir: str | os.PathLike[str], provider_addresses: list[str]) -> str:
    """The `provider_installation` block that makes Terraform install these providers from the mirror."""
    included = ", ".join(_hcl_string(address) for address in provider_addresses)
    return (
        "provider_installation {\n"
        "  filesystem_mirror {\n"
        f"    path    = {_hcl_string(str(Path(mirror_dir).resolve()))}\n"
        f"    include = [{included}]\n"
        "  }\n"
        "  direct {\n"
        f"    exclude = [{included}]\n"
        "  }\n"
        "}\n"
    )
