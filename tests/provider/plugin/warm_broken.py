"""A launch module whose warm daemon cannot start (its WARM_IMPORTS names a missing module)."""

from __future__ import annotations

from tests.provider.plugin.warm_echo import main

WARM_IMPORTS = ("tests.provider.plugin.no_such_module",)

__all__ = ["main"]
