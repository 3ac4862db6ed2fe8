#!/usr/bin/env bash
# Gather into .gpu-check/ what run.sh needs on a GPU server (README.md beside this file).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.gpu-check
lib=/usr/lib/x86_64-linux-gnu
rm -rf "$out"
mkdir -p "$out/fs/usr/sbin" "$out/fs/usr/bin" "$out/fs$lib" "$out/libs"
cp -L /usr/sbin/{slurmctld,slurmd,slurmstepd,munged} "$out/fs/usr/sbin/"
cp -L /usr/bin/{srun,sbatch,sinfo,scontrol,squeue,munge,unmunge} "$out/fs/usr/bin/"
cp -aL "$lib/slurm-wlm" "$lib/pmix2" "$out/fs$lib/"
rm -f "$out/fs$lib/pmix2/lib/libpmix.a"
# The libraries they link, but the C library's own (the server's is newer, and must stay the one used).
ldd "$out"/fs/usr/sbin/* "$out"/fs/usr/bin/* "$out/fs$lib"/slurm-wlm/*.so "$out/fs$lib"/pmix2/lib/pmix/*.so \
    2>/dev/null | awk '/=> \//{print $3}' | sort -u | while read -r path; do
  case $(basename "$path") in
    libc.so*|libm.so*|libresolv.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*) ;;
    *) [ -e "$out/fs$lib/slurm-wlm/$(basename "$path")" ] || cp -L "$path" "$out/libs/" ;;
  esac
done
.venv/bin/python - "$out" <<'PY'
import sys
from pathlib import Path
from backend.provisioning.drivers.local.observe import agent_script
from backend.provisioning.drivers.ssh_hosts import host_check
from backend.provisioning.drivers.ssh_hosts.footprint import steps_slice_script
from backend.provisioning.node_config import configure
from backend.provisioning.node_config.containers import TASK_PROLOG
out = Path(sys.argv[1])
(out / "agent.py").write_text(agent_script())
(out / "probe.sh").write_text(host_check._PROBE_SCRIPT)
(out / "gpucloud-task-prolog").write_text(TASK_PROLOG)
# The daemons started as the own-hosts driver starts them (host_nodes.start_slurmd, the controller's start).
(out / "start-daemons.sh").write_text(
    configure.OWN + configure.start_command("munged") + "\nsleep 1\n" + configure.start_command("slurmctld")
    + "\n" + steps_slice_script() + configure.start_command("slurmd", "-N", "check-0") + "\n")
PY
cp scripts/gpu-server-check/run.sh "$out/"
du -sh "$out"
