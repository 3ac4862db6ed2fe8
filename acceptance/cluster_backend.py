"""A real backend for the gpu_cluster acceptance tests: the engine at a fast simulation speed, no random
faults (a test turns them on explicitly), and a restart that keeps the store (the same data directory,
port and API key), for fault injection and for killing the backend in the middle of an apply.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from acceptance.backend import BACKEND, Backend, _wait_healthy, running_backend

# 20-minute cluster bring-ups take about 1 s; nothing fails unless a test says so.
FAST_ENGINE = {
    "GPUCLOUD_SIMULATION_SPEED": "1500",
    "GPUCLOUD_SIMULATION_SEED": "7",
    "GPUCLOUD_SIMULATION_BOOT_FAILURE_RATE": "0",
    "GPUCLOUD_SIMULATION_ACCEPTANCE_FAILURE_RATE": "0",
    "GPUCLOUD_SIMULATION_XID_RATE": "0",
}


@contextlib.contextmanager
def fast_backend(data_dir: Path) -> Iterator[Backend]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in FAST_ENGINE.items():
            patch.setenv(name, value)
        with running_backend(data_dir) as server:
            try:
                yield server
            finally:
                kill(server)  # the process now running, which a restart may have replaced


def kill(backend: Backend) -> None:
    """SIGKILL the backend (and its embedded engine worker), as a crash would."""
    if backend.process.poll() is None:
        os.killpg(backend.process.pid, signal.SIGKILL)
        backend.process.wait()


def restart(backend: Backend, extra_env: Mapping[str, str] | None = None) -> None:
    """Stop the backend (SIGKILL) and start it again on the same store and port, with `extra_env`."""
    kill(backend)
    port = backend.url.rsplit(":", 1)[1]
    env = {**os.environ, **FAST_ENGINE, "GPUCLOUD_DATA_DIR": str(backend.data_dir), "GPUCLOUD_PORT": port,
           "GPUCLOUD_HOST": "127.0.0.1", **(extra_env or {})}
    log = backend.data_dir / "backend.log"
    with log.open("ab") as sink:
        backend.process = subprocess.Popen([str(BACKEND), "serve"], env=env, stdout=sink,
                                           stderr=subprocess.STDOUT, start_new_session=True)
    _wait_healthy(backend.url, backend.process, log)
