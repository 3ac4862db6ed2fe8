#!/usr/bin/env bash
# On the GPU server: `run.sh probe OUT`, then (after config.py here) `run.sh slurm OUT` (README.md).
set -u
here=$(cd "$(dirname "$0")" && pwd)
step=$1 out=$2
mkdir -p "$out"
cd "$here"

probe() {
  sh probe.sh > "$out/probe.txt" 2>&1
  python3 - < agent.py > "$out/agent.json" 2> "$out/agent.err"
  { echo "== uname"; uname -a; echo "== os"; head -3 /etc/os-release; echo "== python3"; python3 --version
    echo "== nvidia-smi -L"; nvidia-smi -L; echo "== device files"; ls -l /dev/nvidia*
    echo "== NUMA nodes"; for n in /sys/devices/system/node/node*; do echo "$n $(cat "$n/cpulist")"; done
    echo "== topology"; nvidia-smi topo -m; } > "$out/host.txt" 2>&1
  install_bundle
  slurmd -C | grep -v UpTime > "$out/slurmd-C.txt" 2>&1
  cat "$out/probe.txt" "$out/slurmd-C.txt"
}

install_bundle() {  # the machine is a throwaway: Debian's Slurm and munge go where Debian puts them
  cp -a fs/. /
  mkdir -p /opt/gpu-check-libs
  for f in libs/*; do
    ldconfig -p | grep -q "^\s*$(basename "$f") " || cp "$f" /opt/gpu-check-libs/
  done
  echo /opt/gpu-check-libs > /etc/ld.so.conf.d/zz-gpu-check.conf
  ldconfig
}

slurm() {
  exec > >(tee "$out/result.txt") 2>&1
  install_bundle
  id slurm >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin slurm
  id munge >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin munge
  id ubuntu >/dev/null 2>&1 || useradd -m -u 2000001 -s /bin/bash ubuntu
  mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge /etc/slurm /var/lib/slurm/slurmctld \
           /var/lib/slurm/slurmd /var/log/slurm /run/slurm
  head -c 1024 /dev/urandom > /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
  chown -R munge: /etc/munge /run/munge /var/lib/munge /var/log/munge
  chown -R slurm: /var/lib/slurm /var/log/slurm /run/slurm
  sed "s/@HOST@/$(hostname -s)/" slurm.conf > /etc/slurm/slurm.conf
  cp gres.conf cgroup.conf /etc/slurm/
  install -m 755 gpucloud-task-prolog /etc/slurm/gpucloud-task-prolog
  grep -q " check-0$" /etc/hosts || echo "127.0.0.1 check-0" >> /etc/hosts
  sh -e start-daemons.sh  # written by bundle.sh from the driver's own start commands
  for _ in $(seq 60); do [ "$(sinfo -h -N -o %T)" = idle ] && break; sleep 0.5; done
  sinfo -N -o "%N %T %c %m %G"
  scontrol show node check-0 | grep -E "Gres=|CfgTRES|State="
  cd /tmp
  as_user() { runuser -u ubuntu -- timeout 120 "$@"; echo "rc=$?"; }
  echo "== one GPU"
  as_user srun -N1 --gres=gpu:1 bash -c 'echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; nvidia-smi -L'
  if command -v python3 >/dev/null && python3 -c "import torch" 2>/dev/null; then
    echo "== PyTorch bf16 matrix product on the job's GPU"
    as_user srun -N1 --gres=gpu:1 "$(command -v python3)" -c '
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
for _ in range(3): a @ b
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(50): a @ b
torch.cuda.synchronize(); print(torch.cuda.get_device_name(0), f"{2 * 8192**3 * 50 / (time.perf_counter() - t) / 1e12:.0f} TFLOP/s")'
  fi
  echo "== more GPUs than the server has (refused)"
  as_user srun -N1 --gres=gpu:$(( $(nvidia-smi -L | wc -l) + 1 )) true
  echo "== no GPU"
  as_user srun -N1 true
  echo "== batch"
  as_user sbatch -W -o /tmp/batch.out --gres=gpu:1 --wrap 'nvidia-smi -L'
  cat /tmp/batch.out
  cp /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log "$out/"
}

"$step"
