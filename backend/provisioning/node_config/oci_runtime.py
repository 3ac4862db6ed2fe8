#!/usr/bin/python3 -I
"""The OCI runtime Slurm's `oci.conf` runs for `srun --container=/images/<name>` (RunTimeRun): crun, rootless,
as the job's user. Installed on every Slurm node by `containers.py` as one file: standard library only.

Slurm 22.05 runs it as the job's user in the step's spool directory (`%b`), where it copied the bundle's
`config.json` with the task's arguments and environment added. crun cannot run that copy as it stands:
the image's root belongs to the importer and is read-only, so no mount point can be made in it, and
nothing of the job's world (home, volumes, working directory, PMIx) is mounted. Here the copy is adapted:

- the root is an *underlay* made in a directory of the user's in the node's /tmp (not in Slurm's spool
  directory, which slurmstepd removes itself): the image's top-level entries bound read-only into it,
  deep enough along each mount's path that every mount point can be made (the image itself is never
  written); the bundle `/images/<name>` points to is resolved once, so a job
  keeps the bundle it started on when the name is switched, and a shared lock on its digest in the
  store keeps the garbage collector from it until the job ends;
- the job runs as the user itself (uid and gid mapped to themselves in a user namespace), with the node's
  network and hostname (MPI and the cluster's services), its home, the `--bind` directories (the
  cluster's volumes), its working directory ($PWD: Slurm replaces the step's own with the spool
  directory) and the PMIx directories bound in;
- the environment is the job's, except that what the image defines wins (PATH of a conda image), but
  for Slurm's, PMIx's and the GPU binding variables, which are the job's.

At the step's end Slurm, as root, asks for the container's state and kills and deletes what is left
(`state`, `kill`, `delete`): done as the job's user, on that user's crun state directory.

GPUs: on a node with NVIDIA GPUs and the NVIDIA container toolkit installed, its prestart hook passes the
job's GPUs (Slurm's host indices) and the driver's libraries into the container; the local driver's nodes
have none, so nothing is passed there.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

CRUN = "/usr/bin/crun"
NVIDIA_HOOK = "/usr/bin/nvidia-container-runtime-hook"  # the NVIDIA container toolkit's OCI hook
NVIDIA_CONTROL_DEVICE = "/dev/nvidiactl"  # present where the NVIDIA driver is loaded
STATE_ROOT = "/tmp/crun-"  # + the user's name: crun's state directory (`state_root`)
UNDERLAY = "rootfs"  # in the spool directory, next to config.json; removed when the container ends
# The task's environment, as Slurm's TaskProlog saw it (`containers.TASK_PROLOG` writes it beside
# config.json): Slurm 22.05 wrote config.json before the task's own variables were set.
TASK_ENVIRONMENT = "task-environment.json"
# The job's values win for these even where the image defines them.
JOB_VARIABLE_PREFIXES = ("SLURM_", "SLURMD_", "PMIX_", "PMI_", "OMPI_MCA_pmix")
JOB_VARIABLES = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL",
                           "HOME", "USER", "LOGNAME"})
# Directories PMIx clients must reach (the server's rendezvous and shared-memory store).
PMIX_DIRECTORY_VARIABLES = ("PMIX_SERVER_TMPDIR", "PMIX_SYSTEM_TMPDIR")
# Namespaces of the node the job keeps: MPI and NCCL reach the other nodes over its network, and Slurm's
# tools and the job's logs name the node, not a container.
SHARED_NAMESPACES = frozenset({"network", "uts", "cgroup"})
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
              signal.SIGCONT)


class SetupError(RuntimeError):
    """The container cannot be set up; the message says why and what to do."""


def bind(source: str, destination: str, *, read_only: bool = False) -> dict[str, Any]:
    options = ["rbind", "nosuid", "nodev"] + (["ro"] if read_only else [])
    return {"destination": destination, "type": "bind", "source": source, "options": options}


def is_under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def merged_environment(job_env: Sequence[str], image_env: Sequence[str]) -> list[str]:
    """The job's environment (later entries win, as Slurm appends the job's after the image's), with
    the image's values for the names the image defines, but for the job's own variables."""
    merged: dict[str, str] = {}
    for entry in job_env:
        name, _, value = entry.partition("=")
        merged[name] = value
    for entry in image_env:
        name, _, value = entry.partition("=")
        if name not in JOB_VARIABLES and not name.startswith(JOB_VARIABLE_PREFIXES):
            merged[name] = value
    return [f"{name}={value}" for name, value in merged.items()]


def job_binds(env: dict[str, str], home: str, extra: Iterable[str]) -> list[str]:
    """Host directories the job sees at the same path: its home, the `extra` ones (the cluster's
    volumes), its working directory and PMIx's, each once (none inside another) and only if present."""
    wanted = [home, *extra, env.get("PWD", ""), *(env.get(name, "") for name in PMIX_DIRECTORY_VARIABLES)]
    chosen: list[str] = []
    for path in (os.path.normpath(p) for p in wanted if p and os.path.isabs(p)):
        if path != "/" and os.path.isdir(path) and not any(is_under(path, c) for c in chosen):
            chosen = [c for c in chosen if not is_under(c, path)] + [path]
    return chosen


def underlay(image_root: str, underlay_root: str, destinations: Iterable[str]) -> list[dict[str, Any]]:
    """Make `underlay_root` a writable copy of the image's directory skeleton along the path of every
    mount destination (so crun can make any mount point), and return the read-only binds of the image's
    entries into it (none for an entry a destination covers: its mount point is enough)."""
    covered = {os.path.normpath(d) for d in destinations}  # mounted over: an empty mount point will do
    needed = {"/"}
    for destination in covered:
        parts = [p for p in destination.split("/") if p]
        needed.update("/" + "/".join(parts[:depth]) for depth in range(1, len(parts)))
    mounts: list[dict[str, Any]] = []

    def copy_level(path: str) -> None:
        here = os.path.join(underlay_root, path.lstrip("/"))
        os.makedirs(here, exist_ok=True)
        image_dir = os.path.join(image_root, path.lstrip("/"))
        for entry in sorted(os.listdir(image_dir)) if os.path.isdir(image_dir) else []:
            inner = os.path.join(path, entry)
            source, target = os.path.join(image_dir, entry), os.path.join(here, entry)
            mode = os.lstat(source).st_mode
            if inner in needed and stat.S_ISDIR(mode):
                copy_level(inner)
            elif stat.S_ISLNK(mode):
                os.symlink(os.readlink(source), target)
            elif stat.S_ISDIR(mode) or stat.S_ISREG(mode):  # a mount point for the image's entry
                if stat.S_ISDIR(mode):
                    os.mkdir(target)
                else:
                    open(target, "w").close()
                if inner not in covered:
                    mounts.append(bind(source, inner, read_only=True))

    copy_level("/")
    return mounts


def top_destinations(mounts: Sequence[dict[str, Any]]) -> list[str]:
    """Destinations not inside another mount's (those are made in that mount, not in the root)."""
    paths = [os.path.normpath(str(m["destination"])) for m in mounts]
    return [p for p in paths if not any(o != p and is_under(p, o) for o in paths)]


def adapt(config: dict[str, Any], image_config: dict[str, Any], *, image_root: str, bundle: str, uid: int,
          gid: int, home: str, extra_binds: Sequence[str]) -> dict[str, Any]:
    """The configuration crun runs: `config` (Slurm's copy) rootless as uid/gid on an underlay of
    `image_root`, with the job's directories bound in (see the module's docstring)."""
    process = config.setdefault("process", {})
    env = merged_environment(process.get("env", []), image_config.get("process", {}).get("env", []))
    values = dict(entry.partition("=")[::2] for entry in env)
    binds = [bind(path, path) for path in job_binds(values, home, extra_binds)]
    mounts = [m for m in config.get("mounts", []) if m.get("destination") != "/etc/resolv.conf"
              or os.path.exists(os.path.join(image_root, "etc/resolv.conf"))]
    mounts += binds
    root = os.path.join(bundle, UNDERLAY)
    config["mounts"] = underlay(image_root, root, top_destinations(mounts)) + mounts
    cwd = values.get("PWD", "")
    if not any(is_under(cwd, b["destination"]) for b in binds):
        cwd = process.get("cwd", "/")  # not a directory of this node: the image's
    hook = gpu_hook(values)
    if hook is not None:
        env += [f"NVIDIA_VISIBLE_DEVICES={hook['gpus']}", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
        config.setdefault("hooks", {}).setdefault("prestart", []).append(hook["hook"])
    process.update(env=env, terminal=False, user={"uid": uid, "gid": gid}, cwd=cwd)
    config["root"] = {"path": root, "readonly": True}
    config.pop("hostname", None)
    linux = config.setdefault("linux", {})
    linux["namespaces"] = [n for n in linux.get("namespaces", []) if n.get("type") not in SHARED_NAMESPACES]
    if not any(n.get("type") == "user" for n in linux["namespaces"]):
        linux["namespaces"].append({"type": "user"})
    linux["uidMappings"] = [{"containerID": uid, "hostID": uid, "size": 1}]
    linux["gidMappings"] = [{"containerID": gid, "hostID": gid, "size": 1}]
    return config


def gpu_hook(env: dict[str, str]) -> dict[str, Any] | None:
    """The NVIDIA toolkit's prestart hook for the job's GPUs, where the node has the driver and the toolkit
    and the job has GPUs: Slurm's host indices (SLURM_STEP_GPUS, else SLURM_JOB_GPUS) are what the hook
    takes as NVIDIA_VISIBLE_DEVICES; inside, CUDA_VISIBLE_DEVICES stays Slurm's."""
    gpus = env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS")
    if not gpus or not (os.path.exists(NVIDIA_HOOK) and os.path.exists(NVIDIA_CONTROL_DEVICE)):
        return None
    hook = {"path": NVIDIA_HOOK, "args": ["nvidia-container-runtime-hook", "prestart"]}
    return {"gpus": gpus, "hook": hook}


def state_directory(path: str, uid: int) -> str:
    """crun's state directory for this user (crun does not make it): the user's alone."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or info.st_mode & 0o077:
            raise SetupError(f"{path} must be a directory of uid {uid} with mode 0700; remove it") from None
    return path


def task_environment(bundle: str) -> list[str]:
    """The task's variables the prolog saved (consumed: Slurm removes the directory once it is empty)."""
    path = os.path.join(bundle, TASK_ENVIRONMENT)
    try:
        with open(path) as handle:
            saved = json.load(handle)
    except FileNotFoundError:
        return []  # no task prolog on this node: the step's variables only
    os.unlink(path)
    return [f"{name}={value}" for name, value in saved.items()]


def hold_bundle(image_root: str) -> int | None:
    """A shared lock on the bundle's digest in its store, held until this process ends: the store's
    garbage collector (`images.collect_garbage`) removes no bundle a job holds. None for a bundle that
    is not in a store (`--container` naming a directory of the user's)."""
    bundle = os.path.dirname(image_root)
    bundles = os.path.dirname(bundle)
    if os.path.basename(bundles) != "bundles":
        return None
    lock = os.path.join(os.path.dirname(bundles), "locks", f"{os.path.basename(bundle)}.lock")
    try:
        descriptor = os.open(lock, os.O_RDONLY)
    except OSError as problem:
        raise SetupError(f"cannot hold the image's lock {lock} ({problem.strerror}): the image store "
                         "was not made by gpucloud's importer") from None
    fcntl.flock(descriptor, fcntl.LOCK_SH)
    if not os.path.isdir(image_root):  # collected between resolving the name and locking
        raise SetupError("the image was replaced while the job started: run it again")
    return descriptor


def prepare(bundle: str, extra_binds: Sequence[str], scratch: str) -> int | None:
    """Rewrite `bundle`/config.json (Slurm's copy) for crun, making the underlay in `scratch` (a directory
    of the user's outside Slurm's spool: slurmstepd removes the spool directory itself, and an underlay
    still being removed there when a cancelled job's step ends would leave it behind); returns the lock
    that keeps the image's bundle while the job runs (`hold_bundle`)."""
    config_path = os.path.join(bundle, "config.json")
    with open(config_path) as handle:
        config = json.load(handle)
    process = config.setdefault("process", {})
    process["env"] = [*process.get("env", []), *task_environment(bundle)]
    image_root = os.path.realpath(str(config.get("root", {}).get("path", "")))
    if not os.path.isdir(image_root):
        raise SetupError(f"the image's root {config.get('root', {}).get('path')} is missing: check the name "
                         "under /images (`ls /images`)")
    held = hold_bundle(image_root)
    with open(os.path.join(os.path.dirname(image_root), "config.json")) as handle:
        image_config = json.load(handle)
    uid, gid = os.getuid(), os.getgid()
    adapted = adapt(config, image_config, image_root=image_root, bundle=scratch, uid=uid, gid=gid,
                    home=_home(uid), extra_binds=extra_binds)
    partial = f"{config_path}.new"
    with open(partial, "w") as handle:
        json.dump(adapted, handle)
    os.replace(partial, config_path)  # the spool directory is the user's; the copy was root's
    return held


def _home(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_dir
    except KeyError:
        raise SetupError(f"uid {uid} has no account on {os.uname().nodename}") from None


def state_root(user: str) -> str:
    """crun's state directory for `user`: the node's own /tmp (Slurm 22.05 has no pattern for the uid)."""
    return f"{STATE_ROOT}{user}"


def become(user: str) -> None:
    """Run as `user` from here on. Slurm runs the query, kill and delete as root, on a state directory the
    user writes: as root, crun would signal whatever pid a forged state names; as the user, only the
    user's own processes."""
    entry = pwd.getpwnam(user)
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(entry.pw_gid)
        os.setuid(entry.pw_uid)
    elif os.geteuid() != entry.pw_uid:
        raise SetupError(f"runs as {entry.pw_name} or root, not uid {os.geteuid()}")


def run(state_dir: str, bundle: str, container_id: str) -> int:
    """crun in the foreground, signals passed on to it (Slurm signals this process), its exit status."""
    # No cgroup of its own: the container stays in the step's, under Slurm's limits and tracking.
    argv = [CRUN, "--rootless=true", f"--root={state_dir}", "--cgroup-manager=disabled", "run", "--bundle",
            bundle, container_id]
    child = subprocess.Popen(argv)
    for number in _FORWARDED:
        signal.signal(number, lambda received, _frame: child.send_signal(received))
    return child.wait()


def state(state_dir: str, container_id: str) -> int:
    """crun's state of the container, or `stopped` once crun removed it (Slurm logs an error for a
    query that prints no state, and every container is removed when its step ends)."""
    done = subprocess.run([CRUN, f"--root={state_dir}", "state", container_id], capture_output=True,
                          text=True, check=False)
    print(done.stdout if done.returncode == 0 else json.dumps({"id": container_id, "status": "stopped"}))
    return 0


def start(args: argparse.Namespace) -> int:
    """RunTimeRun: adapt the step's bundle, run it, clean up."""
    scratch, held = None, None
    try:
        become(args.user)
        scratch = tempfile.mkdtemp(prefix="gpucloud-oci-", dir="/tmp")  # the node's own /tmp
        held = prepare(args.bundle, args.bind, scratch)  # open (locked) until this process ends with the job
        state_dir = state_directory(state_root(args.user), os.getuid())
    except (SetupError, OSError, ValueError, KeyError) as problem:
        print(f"gpucloud-oci-run: cannot start the container: {problem}", file=sys.stderr)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        return 125
    try:
        return run(state_dir, args.bundle, args.id)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if held is not None:
            os.close(held)


def login(image: str, extra_binds: Sequence[str]) -> int:
    """A single-node cluster's SSH session inside its container (sshd's ForceCommand): the login shell, or
    the command the client asked for (`SSH_ORIGINAL_COMMAND`: scp, rsync, a one-off), in `image` as the
    user, with home and volumes as for jobs and a terminal when the session has one."""
    image_root = os.path.realpath(os.path.join(image, "rootfs"))
    if not os.path.isdir(image_root):
        print(f"gpucloud: the cluster's container {image} is not there yet (its image is being imported): "
              "try again in a minute", file=sys.stderr)
        return 125
    uid, gid = os.getuid(), os.getgid()
    user = pwd.getpwuid(uid).pw_name
    work = tempfile.mkdtemp(prefix="gpucloud-login-")
    held = None
    try:
        held = hold_bundle(image_root)
        with open(os.path.join(os.path.dirname(image_root), "config.json")) as handle:
            image_config = json.load(handle)
        config = json.loads(json.dumps(image_config))
        command = os.environ.get("SSH_ORIGINAL_COMMAND")
        shell = next((s for s in ("/bin/bash", "/bin/sh") if os.path.lexists(image_root + s)), "/bin/sh")
        home = _home(uid)
        session = {**os.environ, "PWD": home, "SHELL": shell}
        session.pop("SSH_ORIGINAL_COMMAND", None)
        config.setdefault("process", {}).update(
            args=[shell, "-c", command] if command else [shell, "-l"],
            env=[f"{name}={value}" for name, value in session.items()])
        adapted = adapt(config, image_config, image_root=image_root, bundle=work, uid=uid, gid=gid, home=home,
                        extra_binds=extra_binds)
        adapted["process"]["terminal"] = sys.stdin.isatty()  # crun proxies the session's terminal
        with open(os.path.join(work, "config.json"), "w") as handle:
            json.dump(adapted, handle)
        state_dir = state_directory(state_root(user), uid)
        return run(state_dir, work, f"login.{user}.{os.getpid()}")
    except (SetupError, OSError, ValueError, KeyError) as problem:
        print(f"gpucloud: cannot start the login in the container: {problem}", file=sys.stderr)
        return 125
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if held is not None:
            os.close(held)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpucloud-oci-run", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, what in (("run", "run the step's container in the foreground (RunTimeRun)"),
                       ("state", "print the container's state (RunTimeQuery)"),
                       ("kill", "SIGKILL the container's processes (RunTimeKill)"),
                       ("delete", "remove what is left of the container (RunTimeDelete)")):
        command = commands.add_parser(name, help=what)
        command.add_argument("user", help="the job's user (Slurm's %%u)")
        if name == "run":
            command.add_argument("--bind", action="append", default=[], help="a directory bound at its path")
            command.add_argument("bundle", help="the step's bundle directory (Slurm's %%b)")
        command.add_argument("id", help="the container's id")
    session = commands.add_parser("login", help="an SSH session in the single-node cluster's container")
    session.add_argument("--bind", action="append", default=[], help="a directory bound at its path")
    session.add_argument("image", help="the container's bundle (/images/container)")
    args = parser.parse_args(argv)
    if not os.access(CRUN, os.X_OK):
        print(f"gpucloud-oci-run: {CRUN} is missing on {os.uname().nodename}: install the crun package",
              file=sys.stderr)
        return 127
    if args.command == "run":
        return start(args)
    if args.command == "login":
        return login(args.image, args.bind)
    become(args.user)
    state_dir = state_root(args.user)
    if args.command == "state":
        return state(state_dir, args.id)
    # The container's init is pid 1 of its PID namespace: killing it ends every process in it.
    operation = ["kill", args.id, "KILL"] if args.command == "kill" else ["delete", "--force", args.id]
    return subprocess.run([CRUN, f"--root={state_dir}", *operation], check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
