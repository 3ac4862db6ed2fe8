"""Foreground processes (`gpucloud-backend worker`, `billing-worker`) that stop on SIGTERM or SIGINT.

No Python signal handler: one runs in the main thread between two bytecodes, possibly while that
thread holds the lock of the very `threading.Event` the handler then sets (inside `Event.wait`), and
the process deadlocks for good, deaf to every later signal (seen: a worker that never exited after
SIGTERM). Instead the signals are blocked before any thread starts, the work runs in a thread, and
the main thread takes the signals with `sigtimedwait`.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def run_until_stop_signal(work: Callable[[], None], stop: Callable[[], None], *, name: str) -> None:
    """Run `work()` in a thread; on SIGTERM or SIGINT call `stop()` and wait until `work` returns.

    Call it before this process starts any thread: threads inherit the blocked signals.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    runner = threading.Thread(target=work, name=name)
    runner.start()
    while runner.is_alive():
        if signal.sigtimedwait(STOP_SIGNALS, 1.0) is not None:
            stop()
            break
    runner.join()
