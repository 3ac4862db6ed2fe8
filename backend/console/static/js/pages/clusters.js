// Every cluster of the project: status in the lifecycle's colours, type, nodes, GPUs, cost, region.

import { latest, listAll, STALE } from "../api.js";
import { badge, card, clear, errorBox, fmt, h, table } from "../dom.js";

const REFRESH_MS = 10000;

export function labelChips(labels) {
  const entries = Object.entries(labels || {});
  return entries.length
    ? h("ul", { class: "chips", "aria-label": "Labels" }, entries.map(([k, v]) => h("li", { class: "chip" }, `${k}=${v}`)))
    : null;
}

export async function render(main) {
  const body = h("div", { "aria-live": "polite" }, h("p", { class: "muted" }, "Loading clusters…"));
  clear(main, h("div", { class: "page-head" }, h("h1", null, "Clusters")), body);
  const newest = latest();
  const draw = async () => {
    try {
      const clusters = await newest(listAll("/clusters"));
      if (clusters === STALE) return;
      const live = clusters.filter((c) => !["DESTROYING", "DESTROYED"].includes(c.status));
      clear(body, h("div", { class: "cards" },
        card("Clusters", fmt.int(clusters.length)),
        card("Running", fmt.int(clusters.filter((c) => c.status === "RUNNING").length)),
        card("GPUs", fmt.int(live.reduce((sum, c) => sum + c.num_gpus, 0))),
        card("Hourly cost", fmt.usd(live.reduce((sum, c) => sum + (c.estimated_hourly_cost_usd || 0), 0)))),
      h("div", { class: "panel" }, table([
        { label: "Name", value: (c) => h("div", null, h("a", { href: `#/clusters/${c.id}/overview`, class: "strong" }, c.name), labelChips(c.labels)) },
        { label: "Status", value: (c) => h("span", null, badge(c.status, c.status_reason), c.phase ? h("span", { class: "muted small" }, ` ${c.phase}`) : null) },
        { label: "Type", value: (c) => c.instance_type, nowrap: true },
        { label: "Nodes", value: (c) => fmt.int(c.node_count), numeric: true },
        { label: "GPUs", value: (c) => fmt.int(c.num_gpus), numeric: true },
        { label: "Hourly cost", value: (c) => fmt.usd(c.estimated_hourly_cost_usd), numeric: true, nowrap: true },
        { label: "Region", value: (c) => c.region, nowrap: true },
      ], clusters, {
        caption: "Clusters",
        empty: "No clusters yet: create one with Terraform, the gpucloud CLI or POST /v1/clusters.",
      })));
    } catch (error) {
      clear(body, errorBox(error));
    }
  };
  await draw();
  const timer = setInterval(draw, REFRESH_MS);
  return () => clearInterval(timer);
}
