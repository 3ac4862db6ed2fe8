"""The provider package's build rules that need no download (the full build runs in
acceptance/test_acc_registry_install.py): pins, zip determinism, the launcher."""

from __future__ import annotations

import re
import stat
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from release.provider_package import REPO, REQUIREMENTS, launcher_text, pinned_requirements, write_zip
from tests.test_packaging import BASE, _closure

# The gpucloud CLI's own dependencies: the plugin never imports them, the package leaves them out.
CLI_ONLY = {"click", "rich", "markdown-it-py", "mdurl", "pygments"}


def test_provider_package_pins_every_provider_dependency_with_hashes() -> None:
    pinned = {canonicalize_name(pin.split("==")[0]): pin.split("==")[1] for pin in pinned_requirements()}
    needed = _closure([r for r in BASE if canonicalize_name(Requirement(r).name) not in CLI_ONLY]) - CLI_ONLY
    assert needed <= set(pinned), f"pin these in {REQUIREMENTS.name}: {sorted(needed - set(pinned))}"
    for requirement in BASE:  # the pins satisfy pyproject.toml's ranges
        name = canonicalize_name(Requirement(requirement).name)
        if name in pinned:
            assert Requirement(requirement).specifier.contains(pinned[name]), requirement
    blocks = re.split(r"\n(?=\S)", REQUIREMENTS.read_text())
    assert all("--hash=sha256:" in block for block in blocks if not block.startswith("#"))
    for name in ("protobuf", "msgpack", "h2"):  # the tests serve with what the package ships
        assert metadata.version(name) == pinned[name], name


def test_provider_package_zip_is_deterministic_with_fixed_modes(tmp_path: Path) -> None:
    extension = "lib/x/_c.cpython-311-x86_64-linux-gnu.so"
    files = {"lib/b.py": b"B = 2\n", "launcher": b"#!/bin/sh\n", extension: b"\0"}
    write_zip(tmp_path / "one.zip", files, ["launcher"])
    write_zip(tmp_path / "two.zip", dict(reversed(files.items())), ["launcher"])
    assert (tmp_path / "one.zip").read_bytes() == (tmp_path / "two.zip").read_bytes()
    with zipfile.ZipFile(tmp_path / "one.zip") as archive:
        infos = archive.infolist()
    assert [i.filename for i in infos] == sorted(files)  # and no directory entries (h1: would count them)
    modes = {i.filename: stat.S_IMODE(i.external_attr >> 16) for i in infos}
    assert modes == {"launcher": 0o755, "lib/b.py": 0o644, extension: 0o755}
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}


def test_provider_package_launcher_names_no_path_of_the_build_machine() -> None:
    text = launcher_text("1.2.3", "linux_amd64")
    assert text.startswith("#!/bin/sh\n") and str(REPO) not in text and "/root" not in text
    assert 'exec "${GPUCLOUD_PYTHON:-python3}" -I -S' in text and '"$here/lib" "$@"' in text
