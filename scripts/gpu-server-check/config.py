"""The Slurm files gpucloud writes for a GPU server, from its node agent's reading (agent.json): the
server as the one node of a pool cluster. The catalog has 8-GPU types only, so the type is the catalog's
for the server's GPU model at the server's GPU count. Writes slurm.conf, gres.conf and cgroup.conf into
.gpu-check/ (README.md beside this file)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from backend.domain.catalog import default_catalog
from backend.fabric import slurm
from backend.fabric.layout import ClusterLayout, NodeLayout
from backend.provisioning import pool_hosts
from backend.provisioning.drivers.ssh_hosts import host_check
from backend.provisioning.drivers.ssh_hosts.driver import SLURM_HOST

NODE = "check-0"


def main(agent_json: Path, out: Path) -> None:
    inventory = host_check.inventory_from_agent(json.loads(agent_json.read_text()))
    shape = pool_hosts.node_shape(inventory)
    model = str(inventory.get("gpu_model") or "").lower()
    catalog = default_catalog()
    sold = next(t for t in catalog.instance_types if t.gpu_count and t.gpu_short_name in model)
    itype = dataclasses.replace(sold, gpu_count=inventory["gpu_count"])
    fabric = next(f for f in catalog.fabrics if f.kind == "ethernet")
    layout = ClusterLayout(
        cluster_id="cls_check", name="check", region=fabric.region, orchestrator="slurm",
        interconnect="ethernet", instance_type=itype, fabric=fabric, subnet="127.0.0.0/24",
        partition_key=None,
        nodes=(NodeLayout(NODE, 0, 0, 0, "127.0.0.1"),),
    )
    shapes = {NODE: shape} if shape is not None else {}
    # run.sh puts the server's own short hostname in place of @HOST@ (SlurmctldHost names the machine).
    files = {
        "slurm.conf": slurm.slurm_conf(layout, SLURM_HOST, controller_hostname="@HOST@", shapes=shapes),
        "gres.conf": slurm.gres_conf(layout, SLURM_HOST, shapes),
        "cgroup.conf": slurm.cgroup_conf(layout, SLURM_HOST),
    }
    for name, text in files.items():
        (out / name).write_text(text)
        print(f"== {name}\n{text}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else Path(".gpu-check"))
