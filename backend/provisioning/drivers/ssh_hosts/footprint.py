"""What a cluster leaves on a pool's host, and how it is taken away again ("leave no trace").

A host joins one cluster at a time. Before anything is written, `claim_script` records the host's own state
of every path a cluster node's configuration writes (`MANAGED_PATHS`: a copy of those that exist, the names
of those that do not), whether the cluster's user existed, and which of the daemons a node runs were running;
then it stops those (a server may have munge or Slurm of its own: the cluster's key and files replace theirs
while the host is lent). `release_script` stops every daemon the cluster started (and their systemd units),
deletes the firewall table, removes what the cluster made and puts back what was there, removes the user if
the cluster added it, and starts again the daemons that ran before (systemd units). Packages a check
installed stay (docs/guides/own-hosts.md).

Both scripts are idempotent and safe to repeat after a crash at any point: the claim's record is complete
before its owner file is written (the marker that the host is taken), and the release removes that marker
last. A host claimed by another cluster is refused with exit status `CLAIMED_ELSEWHERE`.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from backend.provisioning.node_config import accounting, containers, firewall
from backend.provisioning.node_config.configure import (
    AUTHORIZED_KEYS_DIR,
    MARIADB_CONFIG,
    MUNGE_KEY,
    SLURM_DIR,
    STATE_DIRS,
    UNIT_PREFIX,
)

STATE_DIR = "/var/lib/gpucloud-host"  # the host's record of its claim; gone after the release
SSHD_DROP_IN = "/etc/ssh/sshd_config.d/50-gpucloud.conf"  # where sshd finds the cluster user's keys
CLAIMED_ELSEWHERE = 3
# Where slurmd puts its steps' cgroup scope on a cgroup v2 host without systemd (SlurmHost.systemd_optional).
STEPS_SLICE = "/sys/fs/cgroup/system.slice"
_MADE_SLICE = f"{STATE_DIR}/made-system-slice"


def _outermost(paths: Iterable[str]) -> list[str]:
    """The paths none of the others contains."""
    unique = sorted(set(paths))
    return [path for path in unique if not any(path.startswith(other + "/") for other in unique)]


# Everything a node's configuration writes on the host (node_config: configure, accounting, containers).
MANAGED_PATHS = (
    "/etc/hosts",
    SLURM_DIR,
    MUNGE_KEY,
    AUTHORIZED_KEYS_DIR,
    SSHD_DROP_IN,
    MARIADB_CONFIG,
    accounting.SOCKET_DIR,
    accounting.MARIADB_LOG_DIR,
    containers.IMAGES,
    containers.LOGIN_CONF,
    *_outermost(path for paths in STATE_DIRS.values() for path in paths),
)
# The daemons a node runs, and the systemd units a server's own packages start them with.
DAEMONS = {"slurmd": "slurmd", "slurmctld": "slurmctld", "slurmdbd": "slurmdbd", "munged": "munge"}
_STOPPED = (*DAEMONS, "slurmstepd")  # a job's step daemons go with slurmd


def claim_script(cluster_id: str, user: str) -> str:
    """Take the host for `cluster_id` (a no-op when it already has it)."""
    q = shlex.quote
    state, owner = q(STATE_DIR), q(f"{STATE_DIR}/owner")
    paths = " ".join(q(path) for path in MANAGED_PATHS)
    units = " ".join(f"{program}:{unit}" for program, unit in DAEMONS.items())
    return f"""\
set -eu
if [ -f {owner} ]; then
    [ "$(cat {owner})" = {q(cluster_id)} ] && exit 0
    echo "this host is already a node of cluster $(cat {owner})" >&2
    exit {CLAIMED_ELSEWHERE}
fi
rm -rf {state}
install -d -m 700 {state}
: > {state}/absent; : > {state}/present; : > {state}/entries; : > {state}/owners
for path in {paths}; do
    if [ -e "$path" ] || [ -L "$path" ]; then
        echo "$path" >> {state}/present
        find "$path" -xdev >> {state}/entries
        find "$path" -xdev ! -type l -printf '%m %u %g %p\n' >> {state}/owners
    else
        echo "$path" >> {state}/absent
    fi
done
tar -cpPf {state}/saved.tar --warning=no-file-ignored --files-from {state}/present
xargs -r -d '\n' -a {state}/entries sh -c 'for f; do [ -f "$f" ] && [ ! -L "$f" ] && echo "$f"; done' sh \
    | xargs -r -d '\n' md5sum > {state}/sums
if id -u {q(user)} >/dev/null 2>&1; then echo kept > {state}/user; else echo added > {state}/user; fi
: > {state}/daemons
for entry in {units}; do
    program=${{entry%%:*}}; unit=${{entry#*:}}
    if [ -d /run/systemd/system ] && systemctl is-active --quiet "$unit" 2>/dev/null; then
        echo "$unit" >> {state}/daemons
        systemctl stop "$unit"
    elif pgrep -x "$program" >/dev/null; then
        pkill -x "$program" || true
    fi
done
echo {q(cluster_id)} > {state}/owner.new
mv {state}/owner.new {owner}
"""


def steps_slice_script() -> str:
    """Before slurmd starts: on a cgroup v2 host without systemd, the slice slurmd 22.05 makes its steps'
    scope in (it does not make the slice itself); recorded, so that the release removes it again."""
    slice_, made = shlex.quote(STEPS_SLICE), shlex.quote(_MADE_SLICE)
    return (f"if [ ! -d /run/systemd/system ] && [ ! -d {slice_} ] && "
            f"[ \"$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)\" = cgroup2fs ]; then "
            f"mkdir {slice_} && touch {made} || true; fi\n")


def release_script(cluster_id: str, user: str) -> str:
    """Give the host back as it was before `cluster_id` took it (a no-op when it is not that cluster's)."""
    q = shlex.quote
    state, owner = q(STATE_DIR), q(f"{STATE_DIR}/owner")
    programs = " ".join(_STOPPED)
    return f"""\
set -u
[ -f {owner} ] && [ "$(cat {owner})" = {q(cluster_id)} ] || exit 0
if [ -d /run/systemd/system ]; then  # the cluster's daemons' units (node_config.configure.OWN)
    systemctl stop {q(UNIT_PREFIX + "*.service")} 2>/dev/null || true
    systemctl reset-failed {q(UNIT_PREFIX + "*.service")} 2>/dev/null || true
fi
for program in {programs}; do pkill -x "$program" 2>/dev/null || true; done
pkill -f -- {q("--defaults-file=" + MARIADB_CONFIG)} 2>/dev/null || true
for i in $(seq 150); do
    busy=""
    for program in {programs}; do pgrep -x "$program" >/dev/null && busy=1; done
    pgrep -f -- {q("--defaults-file=" + MARIADB_CONFIG)} >/dev/null && busy=1
    [ -z "$busy" ] && break
    sleep 0.1
done
for program in {programs}; do pkill -9 -x "$program" 2>/dev/null || true; done
pkill -9 -f -- {q("--defaults-file=" + MARIADB_CONFIG)} 2>/dev/null || true
if [ -f {q(_MADE_SLICE)} ]; then  # the steps' cgroups, emptied above, and the slice the cluster made
    find {q(STEPS_SLICE)} -depth -type d -exec rmdir {{}} \\; 2>/dev/null || true
fi
nft delete table inet {firewall.TABLE} 2>/dev/null || true
# What the cluster added under the paths that were there goes, and the files it changed; then what was
# there comes back (files it left alone, such as a read-only one, are not written again).
while read -r path; do
    find "$path" -xdev -depth 2>/dev/null | grep -vxF -f {state}/entries | while read -r added; do
        rm -rf "$added"
    done
done < {state}/present
md5sum -c --quiet {state}/sums 2>/dev/null | sed -n 's/: FAILED$//p' | while read -r changed; do
    rm -f "$changed"
done
while read -r path; do rm -rf "$path"; done < {state}/absent
tar -xpPf {state}/saved.tar --skip-old-files
while read -r mode owner group path; do  # owners and modes the configuration set on what was there
    chown "$owner:$group" "$path" 2>/dev/null && chmod "$mode" "$path" 2>/dev/null || true
done < {state}/owners
if grep -qx added {state}/user; then
    pkill -9 -u {q(user)} 2>/dev/null || true
    userdel -r {q(user)} 2>/dev/null || true
    groupdel {q(user)} 2>/dev/null || true
    rm -rf /home/{q(user)}
fi
if [ -s {state}/daemons ] && [ -d /run/systemd/system ]; then
    while read -r unit; do systemctl start "$unit" || true; done < {state}/daemons
fi
rm -f {owner}
rm -rf {state}
"""
