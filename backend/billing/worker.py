"""Running the metering job: in-process next to the API (`start_embedded`) or as its own loop."""

from __future__ import annotations

import threading

import structlog
from sqlalchemy.orm import Session, sessionmaker

from backend.billing.pricing import PriceBook
from backend.billing.pricing_catalog import default_price_book
from backend.billing.service import MeteringResult, run_metering
from backend.billing.settings import BillingSettings, configured
from backend.domain.clock import Clock, SystemClock

log = structlog.get_logger("backend.billing")


class MeteringLoop:
    """Runs a metering pass every `interval_seconds` until stopped; a failed pass is logged and retried
    at the next tick (it rolled back, so nothing is lost or doubled)."""

    def __init__(
        self,
        *,
        sessions: sessionmaker[Session],
        settings: BillingSettings | None = None,
        clock: Clock | None = None,
        prices: PriceBook | None = None,
    ) -> None:
        # Unset: the process's billing settings, the wall clock, the prices of the catalog in force.
        self._sessions = sessions
        self._settings = settings or configured()
        self._clock = clock or SystemClock()
        self._prices = prices or default_price_book()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> MeteringResult:
        return run_metering(
            sessions=self._sessions, clock=self._clock, settings=self._settings, prices=self._prices
        )

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # the loop must survive a bad pass; it rolled back and is retried
                log.exception("billing.pass_failed")
            self._stop.wait(self._settings.interval_seconds)

    def start(self) -> MeteringLoop:
        self._thread = threading.Thread(target=self.run, name="billing-metering", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)


def start_embedded(
    sessions: sessionmaker[Session],
    settings: BillingSettings | None = None,
    *,
    clock: Clock | None = None,
    prices: PriceBook | None = None,
) -> MeteringLoop:
    """Start the metering loop in a background thread of this process (`serve`); `.stop()` ends it."""
    return MeteringLoop(sessions=sessions, settings=settings, clock=clock, prices=prices).start()


def run_forever(loop: MeteringLoop) -> None:
    """Run `loop` in the foreground until SIGTERM or SIGINT (`billing-run`)."""
    from backend.signals import run_until_stop_signal

    run_until_stop_signal(loop.run, lambda: loop.stop(timeout=0), name="billing-metering")
