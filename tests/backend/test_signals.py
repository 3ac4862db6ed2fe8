"""`run_until_stop_signal`: SIGTERM or SIGINT stops the work, however busy the threads are with events."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The work waits on the event in a tight loop, so a signal almost always lands while some thread is
# inside `Event.wait`: the situation in which a handler that sets the event deadlocks.
PROGRAM = """
import sys, threading
from backend.signals import run_until_stop_signal

stop = threading.Event()

def work():
    helpers = [threading.Thread(target=lambda: [stop.wait(0.0001) for _ in iter(stop.is_set, True)])
               for _ in range(3)]
    for helper in helpers:
        helper.start()
    print("ready", flush=True)
    while not stop.wait(0.0001):
        pass
    for helper in helpers:
        helper.join()
    print("stopped", flush=True)

run_until_stop_signal(work, stop.set, name="work")
"""


@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_ends_the_work_and_the_process(signo: int) -> None:
    command = [sys.executable, "-c", PROGRAM]
    with subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None
        try:
            assert process.stdout.readline() == "ready\n"
            process.send_signal(signo)
            out, _ = process.communicate(timeout=20)
        finally:
            process.kill()
    assert process.returncode == 0 and out == "stopped\n"


def test_work_that_returns_by_itself_ends_the_wait() -> None:
    program = ("from backend.signals import run_until_stop_signal; "
               "run_until_stop_signal(lambda: None, lambda: None, name='work'); print('done')")
    done = subprocess.run([sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True,
                          timeout=20)
    assert done.returncode == 0 and done.stdout == "done\n"
