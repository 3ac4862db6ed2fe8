"""The per-call context handed to provider code: diagnostics, provider data, private state, cancellation."""

from __future__ import annotations

import threading
import time
from typing import Any

from provider.cty import AttributePath
from provider.framework.diagnostics import Cancelled, Diagnostics


class Context:
    """Everything a resource method may need besides the values themselves.

    - `diagnostics`: add errors/warnings (`ctx.error(...)`); an error fails the operation, and a create
      that returns a (partial) state with an error makes Terraform taint the resource.
    - `provider_data`: what the provider's `configure` returned (None until configured).
    - `private`: a JSON-able dict stored by Terraform next to the state, never shown to users.
    - `requires_replace`: in `modify_plan`, paths to add to the replacement set.
    - `sleep(seconds)` / `cancelled` / `check_cancelled()`: waits that end when Terraform sends
      StopProvider (Ctrl-C) by raising `Cancelled`.
    """

    __slots__ = (
        "_stop",
        "diagnostics",
        "private",
        "provider_data",
        "requires_replace",
        "terraform_version",
        "type_name",
    )

    def __init__(
        self,
        *,
        stop: threading.Event,
        provider_data: Any = None,
        type_name: str = "",
        private: dict[str, Any] | None = None,
        terraform_version: str = "",
    ) -> None:
        self._stop = stop
        self.provider_data = provider_data
        self.type_name = type_name
        self.private: dict[str, Any] = private if private is not None else {}
        self.diagnostics = Diagnostics()
        self.requires_replace: list[AttributePath] = []
        self.terraform_version = terraform_version

    def error(self, summary: str, detail: str = "", path: AttributePath | None = None) -> None:
        self.diagnostics.error(summary, detail, path)

    def warning(self, summary: str, detail: str = "", path: AttributePath | None = None) -> None:
        self.diagnostics.warning(summary, detail, path)

    def reference_problem(self, summary: str, detail: str, path: AttributePath | None = None) -> None:
        """A problem with another object this one refers to (a volume in another region, a missing key),
        found while planning: a warning, never an error. `terraform destroy` first plans the whole
        configuration normally, a resource that was never created included (as a create), and an error
        there blocks destroying everything else; the API refuses the reference at apply instead."""
        self.diagnostics.warning(summary, f"{detail} The apply will fail on it.", path)

    @property
    def stop_event(self) -> threading.Event:
        """Set when Terraform sends StopProvider: hand it to anything that can be cancelled (HTTP calls)."""
        return self._stop

    @property
    def cancelled(self) -> bool:
        return self._stop.is_set()

    def check_cancelled(self) -> None:
        if self._stop.is_set():
            raise Cancelled()

    def sleep(self, seconds: float) -> None:
        """Wait `seconds`, raising `Cancelled` as soon as Terraform asks the provider to stop."""
        if self._stop.wait(max(0.0, seconds)):
            raise Cancelled()

    def wait_until(self, deadline: float) -> None:
        """Sleep until `time.monotonic()` reaches `deadline` (cancellable)."""
        self.sleep(deadline - time.monotonic())
