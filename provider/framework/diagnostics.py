"""Diagnostics: what the provider tells the user, always with a severity and, when one attribute is to
blame, its path."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from provider.cty import AttributePath, format_path

Severity = Literal["error", "warning"]

log = logging.getLogger("provider.framework")


@dataclass(frozen=True, slots=True)
class Diagnostic:
    severity: Severity
    summary: str
    detail: str = ""
    path: AttributePath | None = None

    def __str__(self) -> str:
        where = f" ({format_path(self.path)})" if self.path else ""
        return f"{self.severity}: {self.summary}{where}: {self.detail}"


class Diagnostics(list[Diagnostic]):
    """A list of diagnostics with shorthands for adding them."""

    def error(self, summary: str, detail: str = "", path: AttributePath | None = None) -> None:
        self.append(Diagnostic("error", summary, detail, path))

    def warning(self, summary: str, detail: str = "", path: AttributePath | None = None) -> None:
        self.append(Diagnostic("warning", summary, detail, path))

    def extend_from(self, other: Iterable[Diagnostic]) -> None:
        self.extend(other)

    @property
    def has_errors(self) -> bool:
        return any(d.severity == "error" for d in self)


class DiagnosticError(Exception):
    """Raise from provider code to stop the operation with one error diagnostic (no traceback logged)."""

    def __init__(self, summary: str, detail: str = "", path: AttributePath | None = None) -> None:
        super().__init__(f"{summary}: {detail}" if detail else summary)
        self.diagnostic = Diagnostic("error", summary, detail, path)


class Cancelled(DiagnosticError):
    """Raised by waits when Terraform asked the provider to stop (StopProvider, e.g. after Ctrl-C)."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            "Operation Cancelled",
            detail
            or "Terraform asked the provider to stop (interrupt) while the operation was in progress. "
            "The remote object may be incomplete; run terraform apply again to converge.",
        )


def diagnostic_from_exception(exc: BaseException, operation: str) -> Diagnostic:
    """Turn any exception into an error diagnostic; unexpected ones get their traceback logged."""
    if isinstance(exc, DiagnosticError):
        return exc.diagnostic
    log.error("internal error during %s", operation, exc_info=exc)
    return Diagnostic(
        "error",
        "Internal Provider Error",
        f"{operation} failed unexpectedly: {type(exc).__name__}: {exc}. "
        "This is a bug in the provider; the provider log (TF_LOG=debug) has the traceback.",
    )
