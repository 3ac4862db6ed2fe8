"""The `local` driver on real namespace nodes, before and after, same run: per round, a 2-node Slurm cluster
from the create request to RUNNING, its scale 2 -> 3 (PATCH node_count) to RUNNING, and its delete to gone.

Two real backends (`gpucloud-backend serve`, GPUCLOUD_DRIVER=local, fresh SQLite stores under /var/tmp) run
side by side: the baseline from a `git worktree` of BENCH_LOCAL_BASELINE_REF (default 40f507b, the last
commit before the node isolation work: PID namespace, pivot_root, per-cluster uids) and the current tree
(this checkout, uncommitted changes included; or a second worktree of BENCH_LOCAL_CURRENT_REF when set).
Both use this venv's interpreter; each imports `backend` from its own tree (PYTHONPATH first, checked and
printed). Rounds alternate baseline and current so that the machine's load falls on both alike.

- create: POST /v1/clusters (2 x 8xH100, Slurm) -> status RUNNING, phase Ready, both nodes RUNNING (booted,
  configured, slurmd registered and idle: the driver's acceptance step);
- scale: PATCH node_count 3 -> the same with 3 nodes; then, untimed, `sinfo` over ssh as `ubuntu` on the login
  node must list the 3 nodes idle;
- delete: DELETE -> the cluster is gone (404).

Figures: median and min of BENCH_LOCAL_ROUNDS rounds (default 3) per phase and tree, and current / baseline
of the medians. Each backend gets half of a /16 no route of this machine covers (172.29.0.0/16 first).
Whatever happens, both backends are stopped, everything the driver made (namespaces and their processes,
bridges, mounts, SSH connection masters) is removed by hand as docs/local-driver.md tells an operator,
checked to be gone, and the worktree removed. Root and Linux with Debian's daemons only; elsewhere it
prints one line saying why it is skipped.

    BENCH_LOCAL_ROUNDS=3 BENCH_LOCAL_BASELINE_REF=40f507b .venv/bin/python -m benchmarks local_driver
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acceptance.backend import Backend

REPO = Path(__file__).resolve().parent.parent
DEFAULT_BASELINE_REF = "40f507b"
# Blocks tried in order; the first that no route of this machine covers (a live bridge of another backend
# included) is split in two, one half per backend.
CANDIDATE_RANGES = ("172.29.0.0/16", "172.28.0.0/16", "172.27.0.0/16", "192.168.224.0/19")
DATA_ROOT = Path("/var/tmp")  # not /tmp: a node has its own /tmp (docs/local-driver.md, shared volumes)
PHASES = {
    "create": "create 2 nodes -> RUNNING",
    "scale": "scale 2 -> 3 -> RUNNING",
    "delete": "delete -> gone",
}
PHASE_TIMEOUT_S = 300.0
POLL_S = 0.1


@dataclass
class Side:
    """One tree under test and its backend."""

    label: str  # "baseline" | "current"
    tree: Path
    description: str
    address_range: str
    data_dir: Path
    backend: Backend | None = None
    key_id: str = ""
    imports_from: str = ""
    cluster_ids: list[str] = field(default_factory=list)
    times: dict[str, list[float]] = field(default_factory=lambda: {phase: [] for phase in PHASES})
    round_s: list[float] = field(default_factory=list)


def run() -> dict[str, Any] | None:
    """Measure both trees, print a table; returns the figures (None when skipped)."""
    rounds = int(os.environ.get("BENCH_LOCAL_ROUNDS", "3"))
    baseline_ref = os.environ.get("BENCH_LOCAL_BASELINE_REF", DEFAULT_BASELINE_REF)
    current_ref = os.environ.get("BENCH_LOCAL_CURRENT_REF", "")
    reason, ranges = _skip_reason()
    if reason:
        print(f"local driver: skipped ({reason})")
        return None
    leftovers: list[str] = []
    previous_term = _raise_on_sigterm()
    try:
        with contextlib.ExitStack() as stack:
            scratch = Path(tempfile.mkdtemp(prefix="gpucloud-bench-local-", dir=DATA_ROOT))
            stack.callback(_remove_scratch, scratch, leftovers)
            trees = [stack.enter_context(_worktree(baseline_ref, scratch / "baseline-tree")),
                     stack.enter_context(_worktree(current_ref, scratch / "current-tree")) if current_ref
                     else (REPO, _describe_checkout())]
            sides = [Side(label, tree, description, address_range, scratch / f"{label}-data")
                     for label, (tree, description), address_range
                     in zip(("baseline", "current"), trees, ranges, strict=True)]
            keys = scratch / "keys"
            keys.mkdir()
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "k")],
                           check=True)
            for side in sides:
                side.data_dir.mkdir(mode=0o700)
                stack.callback(_clean_up, side, leftovers)  # after its backend stopped
                _start(stack, side, (keys / "k.pub").read_text())
            print(f"local driver: {rounds} round(s) of create 2 nodes, scale 2 -> 3, delete, "
                  f"baseline and current alternated", flush=True)
            for side in sides:
                print(f"   {side.label}: {side.description}; imports {side.imports_from}; "
                      f"range {side.address_range}", flush=True)
            for index in range(rounds):
                for side in sides:
                    _round(side, index, keys / "k")
    finally:
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, previous_term)
    if leftovers:
        raise RuntimeError("left over after the run: " + "; ".join(leftovers))
    return _report(sides, rounds)


# ---- the measurement ---------------------------------------------------------------------------------


def _start(stack: contextlib.ExitStack, side: Side, public_key: str) -> None:
    from acceptance.backend import running_backend

    env = _backend_env(side)
    side.imports_from = _imported_backend(env)
    if not side.imports_from.startswith(f"{side.tree}/"):
        raise RuntimeError(f"{side.label}: backend is imported from {side.imports_from}, not {side.tree}")
    side.backend = stack.enter_context(running_backend(side.data_dir, env=env))
    key = side.backend.client.create_ssh_key(name="bench", public_key=public_key,
                                             idempotency_key=uuid.uuid4().hex)
    side.key_id = key["id"]


def _backend_env(side: Side) -> dict[str, str]:
    pythonpath = [str(side.tree), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {
        "PYTHONPATH": os.pathsep.join(pythonpath),  # before the editable install of /work/main
        "GPUCLOUD_DRIVER": "local",
        "GPUCLOUD_LOCAL_ADDRESS_RANGE": side.address_range,
        "GPUCLOUD_DATABASE_URL": "",  # each its own SQLite store in its data dir
        "GPUCLOUD_LOG_LEVEL": os.environ.get("GPUCLOUD_LOG_LEVEL", "info"),
    }


def _imported_backend(env: dict[str, str]) -> str:
    """Where `gpucloud-backend` with `env` imports `backend` from: its console script's interpreter and
    sys.path (the script's directory first, then PYTHONPATH, then the venv's packages)."""
    from acceptance.backend import BACKEND

    code = (f"import sys; sys.path[0] = {str(BACKEND.parent)!r}; import backend; "
            "print(backend.__file__)")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True,
                          text=True, check=True, cwd=DATA_ROOT)
    return done.stdout.strip()


def _round(side: Side, index: int, private_key: Path) -> None:
    assert side.backend is not None
    client = side.backend.client
    began = time.monotonic()
    started = time.monotonic()
    cluster = client.create_cluster(
        {"name": f"bench-{index}", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2,
         "orchestrator": "slurm", "ssh_key_ids": [side.key_id]}, idempotency_key=uuid.uuid4().hex)
    cluster_id = cluster["id"]
    side.cluster_ids.append(cluster_id)
    _wait(side, cluster_id, _converged(2), "create")
    side.times["create"].append(time.monotonic() - started)

    started = time.monotonic()
    client.update_cluster(cluster_id, {"node_count": 3})
    body = _wait(side, cluster_id, _converged(3), "scale")
    side.times["scale"].append(time.monotonic() - started)
    _check_slurm(side, body, private_key, 3)  # untimed: the third slurmd registered, seen from Slurm

    started = time.monotonic()
    client.delete_cluster(cluster_id)
    _wait(side, cluster_id, lambda found: found is None, "delete")
    side.times["delete"].append(time.monotonic() - started)
    side.round_s.append(time.monotonic() - began)
    figures = " ".join(f"{phase} {side.times[phase][-1]:.1f}" for phase in PHASES)
    print(f"   round {index + 1} {side.label:8s} {figures} s", flush=True)


def _converged(count: int) -> Callable[[dict[str, Any] | None], bool]:
    def done(body: dict[str, Any] | None) -> bool:
        return (body is not None and body["status"] == "RUNNING" and body.get("phase") == "Ready"
                and len(body["nodes"]) == count and all(n["status"] == "RUNNING" for n in body["nodes"]))
    return done


def _wait(side: Side, cluster_id: str, wanted: Callable[[dict[str, Any] | None], bool], what: str
          ) -> dict[str, Any]:
    """Poll GET until `wanted(body)` (body None: the cluster is gone); the last body (or {})."""
    from provider.client.errors import ApiError

    assert side.backend is not None
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while True:
        body: dict[str, Any] | None
        try:
            body = side.backend.client.get_cluster(cluster_id)
        except ApiError as error:
            if error.status != 404:
                raise
            body = None
        if body is not None and body["status"] == "DELETED":
            body = None
        if wanted(body):
            return body or {}
        failed = body is not None and body["status"] == "FAILED"
        if failed or time.monotonic() > deadline:
            state = "gone" if body is None else (
                f"status {body['status']}, phase {body.get('phase')}, reason {body.get('status_reason')!r}, "
                f"nodes {[n['status'] for n in body['nodes']]}")
            outcome = "FAILED" if failed else f"not done after {PHASE_TIMEOUT_S:.0f} s"
            raise RuntimeError(f"{side.label} {what} of {cluster_id}: {outcome} ({state})"
                               f"\n--- {side.label} backend log (tail) ---\n{_log_tail(side)}")
        time.sleep(POLL_S)


def _check_slurm(side: Side, body: dict[str, Any], private_key: Path, count: int) -> None:
    done = subprocess.run(
        ["ssh", "-i", str(private_key), "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
         "-o", "LogLevel=ERROR",
         f"ubuntu@{body['login']['public_ip']}", "sinfo -h -N -o '%N %t'"],
        capture_output=True, text=True, timeout=60, check=False)
    states = dict(line.split() for line in done.stdout.splitlines() if len(line.split()) == 2)
    if len(states) != count or set(states.values()) != {"idle"}:
        raise RuntimeError(f"{side.label}: after the scale, sinfo on the login node lists "
                           f"{states or 'nothing'} (wanted {count} idle nodes; "
                           f"ssh exit {done.returncode}: {done.stderr.strip()})")


def _log_tail(side: Side, lines: int = 25) -> str:
    """The backend log's last lines but the access log (this benchmark's polling)."""
    log = side.data_dir / "backend.log"
    if not log.exists():
        return "(none)"
    kept = [line for line in log.read_text(errors="replace").splitlines() if '"event": "request"' not in line]
    return "\n".join(kept[-lines:]) or "(nothing but the access log)"


def _report(sides: list[Side], rounds: int) -> dict[str, Any]:
    from benchmarks.stats import table

    baseline, current = sides
    figures: dict[str, Any] = {
        side.label: {"tree": side.description, **{phase: {
            "median_s": round(statistics.median(side.times[phase]), 2),
            "min_s": round(min(side.times[phase]), 2),
            "rounds_s": [round(value, 2) for value in side.times[phase]],
        } for phase in PHASES}} for side in sides
    }
    rows = []
    for phase, label in PHASES.items():
        before, after = figures["baseline"][phase], figures["current"][phase]
        ratio = after["median_s"] / before["median_s"]
        figures[f"{phase}_current_to_baseline_ratio"] = round(ratio, 2)
        rows.append([label, f"{before['median_s']:.1f}", f"{before['min_s']:.1f}", f"{after['median_s']:.1f}",
                     f"{after['min_s']:.1f}", f"{ratio:.2f}x"])
    print(f"local driver, {rounds} alternated round(s) each (s); baseline {baseline.description}, "
          f"current {current.description}")
    print(table(["phase", "baseline median", "baseline min", "current median", "current min",
                 "current / baseline"], rows))
    for side in sides:
        figures[side.label]["round_median_s"] = round(statistics.median(side.round_s), 1)
    print(f"one round (create, scale, sinfo check, delete), median: "
          f"baseline {figures['baseline']['round_median_s']:.1f} s, "
          f"current {figures['current']['round_median_s']:.1f} s")
    return figures


# ---- the host: skip reasons, address ranges, trees ---------------------------------------------------


def _skip_reason() -> tuple[str, list[str]]:
    """(why the benchmark cannot run here, or ""; the two address ranges, one per backend)."""
    if not sys.platform.startswith("linux"):
        return f"the local driver needs Linux, this is {sys.platform}", []
    if os.geteuid() != 0:
        return "the local driver needs root", []
    if shutil.which("git") is None or not (REPO / ".git").exists():
        return f"the baseline is a git worktree, and {REPO} is not a git checkout", []
    from backend.provisioning.drivers.local import preflight

    missing = preflight.missing_packages()
    if missing:
        return f"missing packages: {', '.join(missing)}; {preflight.install_command(missing)}", []
    # own_bridge="": a route on any bridge counts, so a block in use by another backend here is passed over.
    free = [cidr for cidr in CANDIDATE_RANGES if preflight.conflicting_route(cidr, own_bridge="") is None]
    if not free:
        return f"every candidate address block ({', '.join(CANDIDATE_RANGES)}) overlaps a route here", []
    halves = [str(half) for half in ipaddress.IPv4Network(free[0]).subnets(prefixlen_diff=1)]
    problems = preflight.host_problems(halves)
    if problems:
        return "; ".join(f"{problem.what} ({problem.fix})" for problem in problems), []
    return "", halves


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def _describe_checkout() -> str:
    dirty = " + uncommitted backend/ changes" if _git("status", "--porcelain", "--", "backend") else ""
    return f"{REPO} at {_git('rev-parse', '--short', 'HEAD')}{dirty}"


@contextlib.contextmanager
def _worktree(ref: str, path: Path) -> Iterator[tuple[Path, str]]:
    """A detached worktree of `ref` at `path`: (path, description); removed when the block ends."""
    commit = _git("rev-parse", "--verify", "--short", f"{ref}^{{commit}}")
    _git("worktree", "add", "--detach", str(path), commit)
    try:
        yield path, f"{ref} = {commit} (worktree)" if ref != commit else f"{commit} (worktree)"
    finally:
        removed = subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)],
                                 capture_output=True, text=True, check=False)
        if removed.returncode != 0:
            shutil.rmtree(path, ignore_errors=True)
            subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], capture_output=True, check=False)


def _raise_on_sigterm() -> Any:
    """A SIGTERM (make interrupted) unwinds like Ctrl-C, so that the clean-up runs."""
    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)
    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave it
        return signal.getsignal(signal.SIGTERM)


# ---- clean-up: what docs/local-driver.md tells an operator to do, for this run's backends only -------


def _clean_up(side: Side, leftovers: list[str]) -> None:
    """Remove everything of `side`'s driver (its backend is stopped by now), then check nothing is left.

    What is `side`'s: namespaces `gpc-<key>-*` and bridges `gpcb<hash of key>`, where a key is one of its
    cluster ids or a directory name under its data dir's `local/clusters` (the driver's cluster keys, old
    layout or new), or any `gpc-*` namespace / `gpcb*` bridge holding an address of its range (no other
    backend had that range when the run began); processes in those namespaces or naming its data dir; the
    namespaces' cgroups; mounts under its data dir. The steps of remove_by_hand in
    acceptance/test_acc_local_driver.py, kept to this run's own things."""
    local = side.data_dir / "local"
    keys = set(side.cluster_ids)
    if (local / "clusters").is_dir():
        keys.update(path.name for path in (local / "clusters").iterdir())
    for socket in sorted((local / "ssh" / "ctl").glob("*/*")) if (local / "ssh" / "ctl").is_dir() else []:
        subprocess.run(["ssh", "-o", f"ControlPath={socket}", "-O", "exit", "node"], capture_output=True,
                       check=False)
    namespaces = _namespaces(keys, side.address_range)
    for netns in namespaces:
        pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, check=False)
        _kill([int(pid) for pid in pids.stdout.split()])
    _kill(_processes_naming(side.data_dir))  # daemons and ssh masters started with paths in the data dir
    for cgroup in _cgroups(namespaces):
        with contextlib.suppress(OSError):
            (cgroup / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                cgroup.rmdir()
                break
            time.sleep(0.05)
    for netns in namespaces:
        subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)
    for bridge in _bridges(keys, side.address_range):
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)
    for mount in _mounts_under(side.data_dir):
        if subprocess.run(["umount", mount], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
    left = [f"netns {name}" for name in _namespaces(keys, side.address_range)]
    left += [f"cgroup {cgroup}" for cgroup in _cgroups(namespaces) if cgroup.exists()]
    left += [f"bridge {name}" for name in _bridges(keys, side.address_range)]
    left += [f"pid {pid}" for pid in _processes_naming(side.data_dir)]
    mounts = _mounts_under(side.data_dir)
    left += [f"mount {mount}" for mount in mounts]
    if not mounts:  # never rm -rf across a mount (a node's binds of the host's directories)
        shutil.rmtree(side.data_dir, ignore_errors=True)
    if side.data_dir.exists():
        left.append(f"directory {side.data_dir}")
    if left:
        print(f"   {side.label}: LEFT OVER after the clean-up: {', '.join(left)}", flush=True)
    leftovers.extend(f"{side.label}: {item}" for item in left)


def _namespaces(keys: set[str], address_range: str) -> list[str]:
    """This side's network namespaces: named after its cluster keys, or holding an address of its range."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    names = [line.split()[0] for line in listed.splitlines() if line.split() and line.startswith("gpc-")]
    return [name for name in names
            if any(name.startswith(f"gpc-{key}-") for key in keys) or _in_range(address_range, ["-n", name])]


def _in_range(address_range: str, where: list[str]) -> list[str]:
    """Links (of the namespace `where` names: [] for the host's) holding an IPv4 address of the range."""
    network = ipaddress.IPv4Network(address_range)
    listed = subprocess.run(["ip", *where, "-j", "-4", "addr", "show"], capture_output=True, text=True,
                            check=False)
    with contextlib.suppress(ValueError):
        return [link.get("ifname", "") for link in json.loads(listed.stdout or "[]")
                if any(ipaddress.IPv4Address(a["local"]) in network for a in link.get("addr_info", []))]
    return []


def _cgroups(namespaces: list[str]) -> list[Path]:
    """The namespaces' cgroups (`gpucloud/<netns>` in a cgroup v2 hierarchy, by the isolated driver)."""
    roots = [Path(line.split()[4]) for line in Path("/proc/self/mountinfo").read_text().splitlines()
             if line.split(" - ", 1)[-1].startswith("cgroup2 ")]
    return [root / "gpucloud" / netns for root in roots for netns in namespaces
            if (root / "gpucloud" / netns).is_dir()]


def _bridges(keys: set[str], address_range: str) -> list[str]:
    """This side's bridges: named after its cluster keys, or holding an address of its range."""
    named = {f"gpcb{hashlib.sha256(key.encode()).hexdigest()[:8]}" for key in keys}
    found = [name for name in _in_range(address_range, []) if name.startswith("gpcb")]
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=False).stdout
    found += [line.split()[0].split("@")[0] for line in links.splitlines()
              if line.split() and line.split()[0].split("@")[0] in named]
    return sorted(set(found))


def _processes_naming(directory: Path) -> list[int]:
    needle = str(directory).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
    return pids


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
        time.sleep(0.05)


def _mounts_under(directory: Path) -> list[str]:
    """Mount points at or under `directory` in this mount namespace, deepest first."""
    prefix = str(directory)
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(set(points), key=lambda point: (-point.count("/"), point))


def _remove_scratch(scratch: Path, leftovers: list[str]) -> None:
    if _mounts_under(scratch):
        leftovers.append(f"mounts under {scratch}, left in place")
        return
    shutil.rmtree(scratch, ignore_errors=True)
