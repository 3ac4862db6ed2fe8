// The project's reserved public addresses: which cluster answers on each, its price per hour.

import { listAll } from "../api.js";
import { badge, clear, fmt, h, table } from "../dom.js";
import { labelChips } from "./clusters.js";

export async function render(main) {
  const body = h("div", { class: "panel" }, h("p", { class: "muted" }, "Loading reserved IPs…"));
  clear(main, h("div", { class: "page-head" }, h("h1", null, "Reserved IPs")),
    h("p", { class: "muted" }, "A reserved address stays the project's across clusters until it is released; an attached one is the login node's public IP."),
    body);
  const [addresses, clusters] = await Promise.all([listAll("/reserved-ips"), listAll("/clusters")]);
  const names = new Map(clusters.map((c) => [c.id, c.name]));
  clear(body, table([
    { label: "Address", value: (r) => h("code", null, r.address), nowrap: true },
    { label: "Name", value: (r) => h("div", null, r.name || h("span", { class: "muted" }, "—"), labelChips(r.labels)) },
    { label: "Region", value: (r) => r.region, nowrap: true },
    { label: "Status", value: (r) => badge(r.status) },
    { label: "Cluster", value: (r) => (r.cluster_id ? h("a", { href: `#/clusters/${r.cluster_id}/network` }, names.get(r.cluster_id) || r.cluster_id) : "—") },
    { label: "Hourly cost", value: (r) => fmt.usd(r.hourly_cost_usd), numeric: true, nowrap: true },
    { label: "Reserved", value: (r) => fmt.time(r.created_at), nowrap: true },
  ], addresses, { caption: "Reserved IPs", empty: "No reserved IPs yet: reserve one with Terraform or POST /v1/reserved-ips." }));
}
