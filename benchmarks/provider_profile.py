"""Where a Python provider spends its time during `terraform plan`: py-spy on every provider process.

Terraform starts the provider itself, so the profiler attaches from outside: a watcher polls /proc
for processes descended from the Terraform command and runs `py-spy record --pid` on each, writing
collapsed stacks (for a warm launch: the warm daemon's children, which serve the launches). The
summary folds all processes together: samples by package (leaf frame) and the
functions with the most inclusive samples. Sampling at 250 Hz; samples whose leaf frame is a blocking
wait are left out (py-spy's own idle detection misses them, and `--gil` loses the worker threads),
so the figures approximate on-CPU Python time, threads waiting for the GIL included.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from acceptance.harness import Terraform
from benchmarks.stats import table

PY_SPY = Path(sys.executable).with_name("py-spy")
SAMPLE_RATE = 250
# Leaf frames that are a thread blocked in the kernel (py-spy's idle detection misses these when
# the process is paused for sampling): idle pool workers, condition waits, the event loop's poll.
BLOCKED_LEAVES = (
    "_worker (concurrent/futures/thread.py:81)",
    "Condition.wait (threading.py:",
    "Event.wait (threading.py:",
    "Thread._wait_for_tstate_lock (threading.py:",
    "EpollSelector.select (selectors.py:",
    "SimpleQueue.get",
    # A warm launch's thread that waits for its launcher to go, and a spare waiting for its launch
    # (provider/plugin/warm_child.py; warm_daemon.py before it moved there).
    "run_child.<locals>.watch_launcher (provider/plugin/warm_",
    "_receive_launch (provider/plugin/warm_",
    "receive (provider/plugin/warm_daemon.py:",
)
REPO_ROOT = Path(__file__).resolve().parents[1]


def _children(pid: int) -> list[int]:
    """Direct children of pid, from /proc (Linux)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    found: list[int] = []
    for task in tasks:
        try:
            found += [int(child) for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def _descendants(pid: int) -> set[int]:
    seen: set[int] = set()
    pending = [pid]
    while pending:
        for child in _children(pending.pop()):
            if child not in seen:
                seen.add(child)
                pending.append(child)
    return seen


def _is_python(pid: int) -> bool:
    try:
        return "python" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


class ProviderSampler:
    """Attach py-spy to every Python process started under a root pid until stopped.

    With no out_dir it only notes the processes (`pids`), which costs them nothing.
    """

    def __init__(self, root_pid: int, out_dir: Path | None) -> None:
        self.root_pid = root_pid
        self.out_dir = out_dir
        self.recorders: list[subprocess.Popen[bytes]] = []
        self._attached: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> ProviderSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for recorder in self.recorders:
            try:
                recorder.wait(timeout=30)
            except subprocess.TimeoutExpired:
                recorder.kill()

    @property
    def pids(self) -> set[int]:
        return set(self._attached)

    def _watch(self) -> None:
        while not self._stop.is_set():
            for pid in _descendants(self.root_pid) - self._attached:
                if _is_python(pid):
                    self._attached.add(pid)
                    if self.out_dir is None:
                        continue
                    self.recorders.append(subprocess.Popen(
                        [str(PY_SPY), "record", "--pid", str(pid), "--format", "raw", "--rate",
                         str(SAMPLE_RATE), "--output", str(self.out_dir / f"{pid}.txt")],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    ))
            time.sleep(0.005)


def read_stacks(out_dir: Path) -> Counter[tuple[str, ...]]:
    """Collapsed stacks ("f1;f2;f3 COUNT", outermost first) from every recorded process."""
    stacks: Counter[tuple[str, ...]] = Counter()
    for path in out_dir.glob("*.txt"):
        for line in path.read_text().splitlines():
            frames, _, count = line.rpartition(" ")
            if frames:
                stacks[tuple(frames.split(";"))] += int(count)
    return stacks


def _package(frame: str) -> str:
    """`encode (provider/cty/msgpack_codec.py:12)` -> `provider/cty`; site-packages -> the library."""
    location = frame.rpartition("(")[2].rstrip(")").rpartition(":")[0]
    parts = Path(location).parts
    if not parts:
        return "?"
    return "/".join(parts[:2]) if parts[0] in {"provider", "acceptance", "benchmarks"} else parts[0]


def summarise(stacks: Counter[tuple[str, ...]], processes: int, top: int = 15) -> str:
    blocked = sum(count for frames, count in stacks.items() if frames[-1].startswith(BLOCKED_LEAVES))
    stacks = Counter({frames: count for frames, count in stacks.items()
                      if not frames[-1].startswith(BLOCKED_LEAVES)})
    total = sum(stacks.values())
    if not total:
        return "no samples (did py-spy attach? it needs ptrace permission)"
    by_package: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for frames, count in stacks.items():
        by_package[_package(frames[-1])] += count
        for frame in set(frames):
            inclusive[frame] += count
    imports: Counter[str] = Counter()  # samples spent executing each module's top level
    for frames, count in stacks.items():
        modules = {frame for frame in frames if frame.startswith("<module> (") and "<string>" not in frame}
        for module in modules:
            imports[module.split("(", 1)[1].rsplit(":", 1)[0]] += count
    seconds = total / SAMPLE_RATE
    package_rows = [[name, f"{count / SAMPLE_RATE * 1000:.0f}", f"{100 * count / total:.0f}%"]
                    for name, count in by_package.most_common(top)]
    function_rows = [[name[:90], f"{100 * count / total:.0f}%"] for name, count in inclusive.most_common(top)]
    return "\n\n".join([
        f"{processes} provider processes; {total} samples = {seconds:.2f}s of Python on-CPU time across them "
        f"({blocked / SAMPLE_RATE:.2f}s of blocked-thread samples left out)",
        "self time by package (leaf frame):\n" + table(["package", "ms", "share"], package_rows),
        "inclusive time by function:\n" + table(["function (file:line)", "share"], function_rows),
        "importing (inclusive, per module):\n" + table(["module", "ms", "share"], [
            [name, f"{count / SAMPLE_RATE * 1000:.0f}", f"{100 * count / total:.0f}%"]
            for name, count in imports.most_common(12)
        ]),
    ])


def warm_daemon(launch_module: str) -> int | None:
    """The pid of this checkout's warm daemon for `launch_module`: a warm launch's provider process is
    its child, not Terraform's (the launcher Terraform starts only hands over its stdio and waits)."""
    marks = ("warm_daemon", f"'{launch_module}'", str(REPO_ROOT))
    found: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            command = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if all(mark in command for mark in marks):
            found[int(entry)] = parent
    daemons = [pid for pid, parent in found.items() if parent not in found]  # not its forked children
    return daemons[0] if len(daemons) == 1 else None


def _run_watched(tf: Terraform, out_dir: Path | None, *args: str, root: int | None = None) -> set[int]:
    running = tf.start(*args)
    try:
        with ProviderSampler(running.pid if root is None else root, out_dir) as sampler:
            running.wait(check=True)
    finally:
        running.kill()
    return sampler.pids


def watch_provider_processes(tf: Terraform, *args: str) -> set[int]:
    """Run `terraform ARGS`; the pids of the Python (provider) processes it started."""
    return _run_watched(tf, None, *args)


def profile_command(tf: Terraform, out_dir: Path, *args: str, warm_module: str | None = None) -> str:
    """Run `terraform ARGS` with every provider process sampled; returns the summary. With
    `warm_module`, the processes sampled are the warm daemon's children (a plan first starts it)."""
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    root = None
    if warm_module is not None:
        tf.plan()  # the daemon is up, and stays up through the command below
        root = warm_daemon(warm_module)
        if root is None:
            return f"no warm daemon for {warm_module} found: nothing sampled"
    processes = _run_watched(tf, out_dir, *args, root=root)
    return summarise(read_stacks(out_dir), processes=len(processes))


def profile_plan(tf: Terraform, out_dir: Path, *, warm_module: str | None = None) -> None:
    """Profile a create-plan, then (after an apply) a refreshing re-plan, of tf's configuration."""
    print(f"\n-- provider profile: plan of {tf.workdir.name} (empty state) --")
    print(profile_command(tf, out_dir / "plan", "plan", warm_module=warm_module))
    tf.apply()
    print(f"\n-- provider profile: re-plan of {tf.workdir.name} (refresh of every resource) --")
    print(profile_command(tf, out_dir / "re-plan", "plan", warm_module=warm_module))
    tf.destroy()
