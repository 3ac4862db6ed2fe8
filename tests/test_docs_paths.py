"""The guides name only files in this repository: every path they quote or link resolves in the tree."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `backend/store/db.py`-like quotes: relative, with a directory and a file extension.
QUOTED_PATH = re.compile(r"`([A-Za-z_][\w.-]*(?:/[\w.-]+)+\.(?:py|md|json|sh|tf|toml|ya?ml|proto|mako))`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _guides() -> list[Path]:
    return sorted([*ROOT.glob("docs/**/*.md"), ROOT / "README.md"])


def test_docs_name_only_files_in_the_repository() -> None:
    missing = []
    for guide in _guides():
        text = guide.read_text(encoding="utf-8")
        for quoted in QUOTED_PATH.findall(text):
            if not (ROOT / quoted).exists():
                missing.append(f"{guide.relative_to(ROOT)}: `{quoted}`")
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:|#", target):
                continue  # a URL or an anchor in the same page
            if not (guide.parent / target.split("#")[0]).exists():
                missing.append(f"{guide.relative_to(ROOT)}: ({target})")
    assert missing == []
