"""Errors raised by the value system. Codec errors carry the attribute path of the offending value."""

from __future__ import annotations

from provider.cty.path import AttributePath, Step, format_path


class CtyError(Exception):
    """Base class of every error raised by `provider.cty`."""


class TypeJsonError(CtyError, ValueError):
    """A cty type JSON document is malformed."""


class _PathError(CtyError):
    """An error about one value inside a larger one.

    Compiled codecs append steps while the exception unwinds (innermost first), so building the path costs
    nothing on the success path.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self._reversed_steps: list[Step] = []

    @property
    def path(self) -> AttributePath:
        return AttributePath(reversed(self._reversed_steps))

    def add_step(self, step: Step) -> None:
        self._reversed_steps.append(step)

    def __str__(self) -> str:
        if not self._reversed_steps:
            return self.message
        return f"{format_path(self.path)}: {self.message}"


class ValueEncodeError(_PathError):
    """A Python value does not conform to the cty type it is being encoded as."""


class ValueDecodeError(_PathError):
    """Wire bytes do not hold a value of the expected cty type."""
