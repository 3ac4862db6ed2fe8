// Overview: summary cards computed from the nodes' GPU readings and the job table, node health, and
// the Slurm partitions.

import { get, latest, STALE } from "../api.js";
import { badge, card, clear, fmt, h, section, table } from "../dom.js";

const REFRESH_MS = 15000;

// The cards' figures from GET .../nodes and GET .../jobs (pure, so the numbers are easy to check).
export function summarise(cluster, nodes, jobs) {
  const gpus = nodes.items.flatMap((n) => n.gpus || []);
  const utils = gpus.map((g) => g.utilization_pct).filter((v) => v !== null && v !== undefined);
  const used = gpus.reduce((sum, g) => sum + (g.memory_used_mib || 0), 0);
  const total = gpus.reduce((sum, g) => sum + (g.memory_total_mib || 0), 0);
  const running = jobs.items.filter((j) => j.state === "running");
  return {
    totalGpus: cluster.num_gpus,
    // What the running jobs hold: a partition's total less its available GPUs would also count the GPUs
    // of drained, down or booting nodes, which no job holds.
    allocatedGpus: running.reduce((sum, j) => sum + j.gpus, 0),
    avgUtilisation: utils.length ? utils.reduce((a, b) => a + b, 0) / utils.length : null,
    memoryUsedMib: gpus.length ? used : null,
    memoryTotalMib: gpus.length ? total : null,
    runningJobs: jobs.counts.running ?? 0,
    pendingJobs: jobs.counts.pending ?? 0,
    idleNodes: nodes.items.filter((n) => n.orchestrator_state === "IDLE").length,
  };
}

export async function render(panel, context) {
  const id = context.id;
  const newest = latest();
  const draw = async () => {
    const answers = await newest(Promise.all([get(`/clusters/${id}/nodes`), get(`/clusters/${id}/jobs`, { limit: 1000 })]));
    if (answers === STALE) return;
    const [nodes, jobs] = answers;
    const s = summarise(context.cluster(), nodes, jobs);
    const memory = s.memoryTotalMib === null ? "—" : `${fmt.gib(s.memoryUsedMib)} / ${fmt.gib(s.memoryTotalMib)}`;
    clear(panel,
      h("div", { class: "cards" },
        card("Total GPUs", fmt.int(s.totalGpus)),
        card("Allocated GPUs", fmt.int(s.allocatedGpus), s.totalGpus ? `${fmt.pct((100 * s.allocatedGpus) / s.totalGpus)} of all` : null),
        card("Avg GPU utilisation", fmt.pct(s.avgUtilisation)),
        card("GPU memory", memory),
        card("Running jobs", fmt.int(s.runningJobs)),
        card("Pending jobs", fmt.int(s.pendingJobs)),
        card("Idle nodes", `${fmt.int(s.idleNodes)} / ${fmt.int(nodes.items.length)}`)),
      section("Node health",
        h("ul", { class: "health-counts" }, Object.entries(nodes.counts).map(([state, count]) =>
          h("li", null, badge(state), " ", fmt.int(count)))),
        table([
          { label: "Node", value: (n) => n.name },
          { label: "Health", value: (n) => badge(n.health, n.health_reason) },
          { label: "Slurm state", value: (n) => (n.orchestrator_state ? badge(n.orchestrator_state) : "—") },
          { label: "Status", value: (n) => badge(n.status) },
          { label: "Why", value: (n) => n.health_reason || "" },
        ], nodes.items, { caption: "Node health", empty: "No nodes yet." })),
      section("Slurm partitions", table([
        { label: "Partition", value: (p) => p.name },
        { label: "Nodes", value: (p) => fmt.int(p.nodes), numeric: true },
        { label: "GPU type", value: (p) => p.gpu_type || "—" },
        { label: "GPUs available", value: (p) => `${fmt.int(p.gpus_available)} / ${fmt.int(p.gpus_total)}`, numeric: true },
        { label: "Default time", value: (p) => p.default_time },
        { label: "Max time", value: (p) => p.max_time },
        { label: "State", value: (p) => badge(p.state) },
      ], jobs.partitions, { caption: "Slurm partitions", empty: "No Slurm partitions (this cluster runs no Slurm)." })));
  };
  await draw();
  const timer = setInterval(() => draw().catch(() => {}), REFRESH_MS);
  return () => clearInterval(timer);
}
