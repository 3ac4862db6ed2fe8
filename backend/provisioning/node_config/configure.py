"""Node configuration over a `NodeShell`: what a freshly booted server needs to be a cluster node.

The cluster's user with its shared home and authorized keys, `/etc/hosts`, the shared volumes, the munge
key, the Slurm files, and the daemons (munged, slurmctld, slurmd; MariaDB and slurmdbd on the controller,
set up by `accounting.py`), plus the reads the engine makes of a running node (health, Slurm's own
view). Every step is one script per node (one round trip) and
idempotent: a user that exists is kept, a daemon that runs is not started again, a mount that is there
is not mounted again. Nothing here knows how the machine was made or where it runs: it needs a root
shell on it and the values below, which is the seam a bring-your-own-hosts driver plugs into.

Processes are found by name *and* network namespace (`own`): a node made of namespaces shares its process
table with its host and the other nodes, and a server of its own has one namespace, so the same test
holds for both.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from backend.node_agent.xid import XidEvent, parse_xid_lines
from backend.provisioning.node_config import containers
from backend.provisioning.node_config.shell import NodeFile, NodeShell, files_script

AUTHORIZED_KEYS_DIR = "/etc/ssh/authorized_keys"  # root-owned: a user cannot add keys behind the API's back
SLURM_DIR = "/etc/slurm"
MUNGE_KEY = "/etc/munge/munge.key"
SUDOERS_FILE = "/etc/sudoers.d/gpucloud-user"
# Spool, log and run directories of the daemons (Debian's paths), owned by the daemon's user.
STATE_DIRS = {"slurm": ("/var/lib/slurm", "/var/lib/slurm/slurmctld", "/var/lib/slurm/slurmd",
                        "/var/log/slurm", "/run/slurm"),
              "munge": ("/run/munge", "/var/lib/munge", "/var/log/munge")}
MARIADB_CONFIG = "/etc/mysql/gpucloud-slurmdbd.cnf"  # the accounting database's (accounting.py)
DAEMONS = {  # program: how it is started, detached from the shell that starts it, logging to a file
    "munged": ("runuser -u munge -- /usr/sbin/munged --foreground", "/var/log/munge/munged.out"),
    "mariadbd": (f"/usr/sbin/mariadbd --defaults-file={MARIADB_CONFIG}", "/var/log/mysql/mariadbd.out"),
    "slurmdbd": ("/usr/sbin/slurmdbd -D", "/var/log/slurm/slurmdbd.out"),
    "slurmctld": ("/usr/sbin/slurmctld -D", "/var/log/slurm/slurmctld.out"),
    "slurmd": ("/usr/sbin/slurmd -D", "/var/log/slurm/slurmd.out"),
}
# The shell functions every daemon script starts with.
# `own NAME`: pids of program NAME in this machine's network namespace.
# `launch NAME LOG COMMAND...`: COMMAND detached, appending its output to LOG. Where systemd runs the machine,
# as the transient unit `gpucloud-NAME.service` (`UNIT_PREFIX`): supervised by systemd in a cgroup of its own
# (delegated, as Debian's slurmd.service has it), not in the SSH session that started it, and gone once it
# stops (`--collect`); `KillMode=process`, so stopping slurmd leaves its jobs' steps running, as Debian's
# unit does. Elsewhere (the local driver's nodes, a server without systemd) with `setsid`.
UNIT_PREFIX = "gpucloud-"
OWN = ('own() { n=$(readlink /proc/self/ns/net); for p in $(pgrep -x "$1"); do '
       '[ "$(readlink /proc/"$p"/ns/net 2>/dev/null)" = "$n" ] && echo "$p"; done; true; }\n'
       'launch() { name=$1 log=$2; shift 2; '
       'if [ -d /run/systemd/system ] && command -v systemd-run >/dev/null; then '
       'systemd-run --quiet --collect --unit="' + UNIT_PREFIX + '$name" --property=KillMode=process '
       '--property=Delegate=yes /bin/sh -c \'exec "$@" >> "$0" 2>&1 < /dev/null\' "$log" "$@"; '
       'else setsid -f "$@" >> "$log" 2>&1 < /dev/null; fi; }\n')


@dataclass(frozen=True)
class Mount:
    """A file system to mount at `target`: a path the node sees, bound (`fstype` None), or a device or
    export of type `fstype` with `options` (an NFS export on a server of its own)."""

    source: str
    target: str
    fstype: str | None = None
    options: str = ""


@dataclass(frozen=True)
class NodeConfig:
    """What one node of a cluster is configured with (the same for every node of the cluster)."""

    user: str
    uid: int
    public_keys: tuple[str, ...]
    hosts: str  # the cluster's lines of /etc/hosts
    home: Mount | None  # the cluster's shared /home
    volume_root: str  # volumes are mounted under it; other mounts there are ours to remove
    volumes: tuple[Mount, ...] = ()
    munge_key: bytes | None = None
    slurm_files: Mapping[str, str] = field(default_factory=dict)
    # A single-node cluster with a `container`: the user's SSH sessions run inside it (containers.py).
    login_container: bool = False
    # The user may become root with `sudo`, no password (where root of the node is not the host's).
    sudo: bool = False


def configure(shell: NodeShell, config: NodeConfig) -> None:
    """Everything of a node but its Slurm daemons, in one script: user, home, keys, hosts, volumes, munge
    key and daemon, Slurm files and directories, and Slurm's containers (`containers.py`)."""
    files = [_hosts_file(config.hosts), _keys_file(config.user, config.public_keys)]
    files += _slurm_files(config.slurm_files)
    if config.slurm_files:  # `srun --container=/images/<name>`, with the cluster's volumes bound in
        files += containers.node_files([config.volume_root])
    if config.munge_key is not None:
        files.append(NodeFile(MUNGE_KEY, config.munge_key, 0o400, "munge"))
    files += _login_files(config)
    if config.sudo:
        files.append(NodeFile(SUDOERS_FILE, f"{config.user} ALL=(ALL:ALL) NOPASSWD: ALL\n".encode(), 0o440))
    user, uid = shlex.quote(config.user), config.uid
    script = [
        OWN,
        # The group has the user's number too. No password, but not a locked account either (`*`, not
        # `!`: sshd refuses locked accounts); no lastlog/faillog entry (sparse files sized by the uid).
        f"getent group {user} >/dev/null || groupadd --gid {uid} {user}",
        f"id -u {user} >/dev/null 2>&1 || useradd --no-create-home --no-log-init --uid {uid} --gid {uid} "
        f"--password '*' --home-dir /home/{user} --shell /bin/bash {user}",
        _mount_script([config.home] if config.home is not None else []),
        f"install -d -o {user} -g {user} -m 750 /home/{user}",
        *(f"install -d -o {owner} -g {owner} {' '.join(dirs)}" for owner, dirs in STATE_DIRS.items()),
        files_script(files),
        _volumes_script(config),
        containers.images_link_script() if config.slurm_files or config.login_container else "",
        containers.login_script(config.login_container),
    ]
    if config.munge_key is not None:
        script.append(start_command("munged"))
    shell.run_script("\n".join(script), what="configure the node")


def _login_files(config: NodeConfig) -> list[NodeFile]:
    return containers.login_files(config.user, [config.volume_root]) if config.login_container else []


def set_access(shell: NodeShell, config: NodeConfig) -> None:
    """What changes in place on a running node: its authorized keys, the volumes mounted and whether
    logins run in the cluster's container."""
    script = [files_script([_keys_file(config.user, config.public_keys), *_login_files(config)]),
              _volumes_script(config), containers.login_script(config.login_container)]
    if config.login_container:
        script.append(containers.images_link_script())
    shell.run_script("\n".join(script), what="update keys and volumes")


def write_cluster_files(shell: NodeShell, config: NodeConfig) -> None:
    """The files that name the cluster's nodes (`/etc/hosts`, Slurm's), which change when it scales."""
    shell.write_files([_hosts_file(config.hosts), *_slurm_files(config.slurm_files)])


def start_daemons(shell: NodeShell, programs: Sequence[str]) -> None:
    """Start each program unless it already runs on the node (munged first, if listed)."""
    script = OWN + "\n".join(start_command(program) for program in programs)
    shell.run_script(script, what=f"start {' '.join(programs)}")


def stop_daemon(shell: NodeShell, program: str, seconds: int = 15) -> None:
    """SIGTERM the program, SIGKILL it if still there after `seconds`."""
    stop_daemons(shell, [program], seconds)


def stop_daemons(shell: NodeShell, programs: Sequence[str], seconds: int = 15) -> None:
    """Stop each program in turn (SIGTERM, SIGKILL if still there after `seconds`), in one script."""
    script = [OWN]
    for program in programs:
        script.append(f"pids=$(own {program}); if [ -n \"$pids\" ]; then kill $pids 2>/dev/null || true\n"
                      f"for i in $(seq {seconds * 10}); do [ -z \"$(own {program})\" ] && break\n"
                      f"sleep 0.1; done; kill -9 $(own {program}) 2>/dev/null || true; fi")
    shell.run_script("\n".join(script), what=f"stop {' '.join(programs)}")


def running(shell: NodeShell, program: str) -> bool:
    return bool(shell.run_script(f"{OWN}own {program}", what=f"find {program}").stdout.split())


@dataclass(frozen=True)
class Health:
    slurmd_running: bool
    xid_events: list[XidEvent]


def read_health(shell: NodeShell, kernel_log_command: str, timeout: float = 10.0) -> Health:
    """Whether slurmd runs, and the XIDs the kernel logged (`kernel_log_command` prints the kernel log:
    `dmesg` on a server, the stand-in file on a local node)."""
    script = (f"{OWN}[ -n \"$(own slurmd)\" ] && echo slurmd=running || echo slurmd=stopped\n"
              f"{kernel_log_command} 2>/dev/null || true\n")
    done = shell.run_script(script, what="health check", timeout=timeout)
    lines = done.stdout.splitlines()
    return Health(bool(lines) and lines[0] == "slurmd=running", parse_xid_lines(lines[1:]))


def controller_answers(shell: NodeShell) -> tuple[bool, str]:
    done = shell.run(["scontrol", "ping"], check=False)
    output = done.stdout + done.stderr
    return "is UP" in output, output.strip()


def reconfigure_controller(shell: NodeShell) -> None:
    shell.run(["scontrol", "reconfigure"])


def slurm_node_state(shell: NodeShell, node_name: str) -> str:
    """Slurm's state of one node as sinfo prints it (`idle`, `mixed`, `down*`...), or what went wrong."""
    done = shell.run(["sinfo", "-h", "-N", "-n", node_name, "-o", "%T"], check=False)
    # A node in several partitions (a cluster's `slurm_config`) has a line in each, all alike.
    lines = done.stdout.split()
    return lines[0] if lines else done.stderr.strip()


def _hosts_file(hosts: str) -> NodeFile:
    return NodeFile("/etc/hosts", f"127.0.0.1\tlocalhost\n{hosts}".encode())


def _keys_file(user: str, public_keys: Iterable[str]) -> NodeFile:
    content = "".join(f"{key.strip()}\n" for key in public_keys)
    return NodeFile(f"{AUTHORIZED_KEYS_DIR}/{user}", content.encode(), 0o644)


def _slurm_files(files: Mapping[str, str]) -> list[NodeFile]:
    return [NodeFile(f"{SLURM_DIR}/{name}", content.encode()) for name, content in sorted(files.items())]


def start_command(program: str, *arguments: str) -> str:
    """Start `program` (with `arguments` after its own) unless it runs already (needs `OWN`)."""
    command, log = DAEMONS[program]
    extra = "".join(f" {shlex.quote(argument)}" for argument in arguments)
    return f"[ -n \"$(own {program})\" ] || launch {program} {log} {command}{extra}"


def _mount_script(mounts: Iterable[Mount]) -> str:
    """Mount each one that is not mounted there yet (a bind: the target is the source's very directory)."""
    lines = []
    for mount in mounts:
        source, target = shlex.quote(mount.source), shlex.quote(mount.target)
        if mount.fstype is None:
            mounted = f"[ \"$(stat -c %d:%i {target} 2>/dev/null)\" = \"$(stat -c %d:%i {source})\" ]"
            command = f"mount --bind {source} {target}"
        else:
            mounted = f"findmnt -rn -M {target} -S {source} >/dev/null"
            options = f" -o {shlex.quote(mount.options)}" if mount.options else ""
            command = f"mount -t {shlex.quote(mount.fstype)}{options} {source} {target}"
        lines.append(f"{mounted} || {{ mkdir -p {target} && {command}; }}")
    return "\n".join(lines)


def _volumes_script(config: NodeConfig) -> str:
    """Unmount what is mounted under the volume root and not wanted, then mount what is wanted."""
    root = shlex.quote(config.volume_root.rstrip("/") + "/")
    wanted = " ".join(shlex.quote(mount.target) for mount in config.volumes)
    unmount = (f"findmnt -rn -o TARGET | grep -F {root} | sort -u | while read -r t; do\n"
               f"  case \" {wanted} \" in *\" $t \"*) ;; *) umount -l \"$t\" ;; esac\ndone")
    return "\n".join([unmount, _mount_script(config.volumes)])
