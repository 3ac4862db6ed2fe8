"""The engine settings in force in this process (what the driver offers: backend.provisioning.drivers).

The values are `Settings.engine` (backend/settings.py), installed here by the runtime when the process
starts (`use`); engine code deep in a call (admission, the cluster views) asks `configured()` instead of
having them passed through every service. Nothing here reads the environment: a process that built no
runtime (a unit test calling the engine directly) sees the defaults until it calls `use`.
"""

from __future__ import annotations

from backend.settings import SUBNET_PREFIX, EngineSettings

__all__ = ["SUBNET_PREFIX", "EngineSettings", "configured", "configured_driver", "use"]

# model_construct: the declared defaults without reading the environment.
_in_force: EngineSettings = EngineSettings.model_construct()


def use(settings: EngineSettings) -> EngineSettings:
    """Install the engine settings of this process (the runtime does, once at start); returns the
    previous ones, so a test can put them back."""
    global _in_force
    previous, _in_force = _in_force, settings
    return previous


def configured() -> EngineSettings:
    """The engine settings in force (see `use`)."""
    return _in_force


def configured_driver() -> str:
    return _in_force.driver

