// The project's capacity reservations: nodes held for a term at the reserved rate, how many no cluster
// draws now, and the clusters drawing from each.

import { listAll } from "../api.js";
import { badge, clear, fmt, h, table } from "../dom.js";
import { labelChips } from "./clusters.js";

export async function render(main) {
  const body = h("div", { class: "panel" }, h("p", { class: "muted" }, "Loading reservations…"));
  clear(main, h("div", { class: "page-head" }, h("h1", null, "Reservations")),
    h("p", { class: "muted" }, "A reservation holds nodes for its whole term and is charged once, up front; clusters draw from it with reservation_id."),
    body);
  const [reservations, clusters] = await Promise.all([listAll("/reservations"), listAll("/clusters")]);
  const names = new Map(clusters.map((c) => [c.id, c.name]));
  clear(body, table([
    { label: "Name", value: (r) => h("div", null, h("span", { class: "strong" }, r.name), labelChips(r.labels)) },
    { label: "Status", value: (r) => badge(r.status) },
    { label: "Type", value: (r) => r.instance_type, nowrap: true },
    { label: "Region", value: (r) => r.region, nowrap: true },
    { label: "Nodes", value: (r) => `${fmt.int(r.node_count)} (${fmt.int(r.free_nodes)} free)`, numeric: true, nowrap: true },
    { label: "Term", value: (r) => h("span", null, `${r.duration_days} d: `, h("span", { class: "nowrap" }, fmt.time(r.starts_at)), " – ", h("span", { class: "nowrap" }, fmt.time(r.ends_at))) },
    { label: "Rate", value: (r) => `${fmt.usd(r.gpu_hour_usd)}/GPU-h`, numeric: true, nowrap: true },
    { label: "Upfront", value: (r) => fmt.usd(r.upfront_usd), numeric: true, nowrap: true },
    { label: "Clusters", value: (r) => (r.cluster_ids.length
      ? r.cluster_ids.map((id) => h("a", { href: `#/clusters/${id}/overview`, class: "block" }, names.get(id) || id)) : "—") },
  ], reservations, { caption: "Reservations", empty: "No reservations yet: reserve capacity with Terraform or POST /v1/reservations." }));
}
