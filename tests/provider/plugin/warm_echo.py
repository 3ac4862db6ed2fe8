"""A launch module for the warm-path tests: reports who serves the launch, then waits for stdin.

Prints one line `pid ppid cwd GPUCLOUD_API_KEY argv...` on stdout, reads one line from stdin and
exits with the number on it (so a test controls how long a launch runs and what it returns).
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    fields = [str(os.getpid()), str(os.getppid()), os.getcwd(), os.environ.get("GPUCLOUD_API_KEY", "-"),
              *sys.argv[1:]]
    os.write(1, (" ".join(fields) + "\n").encode())
    line = sys.stdin.readline()
    raise SystemExit(int(line or "1"))
