// The project's security groups: each group's inbound and outbound rules and the clusters enforcing it.
// Groups are written with Terraform, the CLI or the API; the console shows them.

import { listAll } from "../api.js";
import { badge, clear, fmt, h, table } from "../dom.js";

// One rule as a line: "tcp 22 from 10.0.0.0/8" (ingress) or "all to 0.0.0.0/0" (egress).
export function ruleText(rule, direction) {
  const ports = rule.from_port === null ? ""
    : rule.to_port !== null && rule.to_port !== rule.from_port ? ` ${rule.from_port}-${rule.to_port}` : ` ${rule.from_port}`;
  return `${rule.protocol}${ports} ${direction === "ingress" ? "from" : "to"} ${rule.cidr_blocks.join(", ")}`;
}

export function rulesList(rules, direction) {
  if (!rules.length) return h("span", { class: "muted" }, direction === "ingress" ? "no inbound rule" : "no outbound rule");
  return h("ul", { class: "rules" }, rules.map((r) => h("li", null, h("code", null, ruleText(r, direction)),
    r.description ? h("span", { class: "muted small" }, ` ${r.description}`) : null)));
}

export async function render(main) {
  const body = h("div", { class: "panel" }, h("p", { class: "muted" }, "Loading security groups…"));
  clear(main, h("div", { class: "page-head" }, h("h1", null, "Security groups")),
    h("p", { class: "muted" }, "Traffic between a cluster's own nodes is always allowed; the rules govern everything else. A cluster that names no group gets the project's default group."),
    body);
  const [groups, clusters] = await Promise.all([listAll("/security-groups"), listAll("/clusters")]);
  const names = new Map(clusters.map((c) => [c.id, c.name]));
  clear(body, table([
    { label: "Name", value: (g) => h("div", null, h("span", { class: "strong" }, g.name), g.is_default ? [" ", badge("default")] : null,
      g.description ? h("div", { class: "muted small" }, g.description) : null) },
    { label: "Inbound", value: (g) => rulesList(g.ingress, "ingress") },
    { label: "Outbound", value: (g) => rulesList(g.egress, "egress") },
    { label: "Clusters", value: (g) => (g.cluster_ids.length
      ? g.cluster_ids.map((id) => h("a", { href: `#/clusters/${id}/network`, class: "block" }, names.get(id) || id)) : "—") },
    { label: "Updated", value: (g) => fmt.time(g.updated_at), nowrap: true },
  ], groups, { caption: "Security groups", empty: "No security groups yet: create one with Terraform or POST /v1/security-groups." }));
}
