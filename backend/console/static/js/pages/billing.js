// Billing: balance, usage by day and by cluster (charts from the usage lines), usage by team (the API's
// chargeback view, GET /v1/billing/usage?group_by=label:team), invoices.

import { get, listAll } from "../api.js";
import { barChart } from "../chart.js";
import { card, clear, fmt, h, section, table } from "../dom.js";

const DAYS = 14;
const TEAM_LABEL = "team";
const money = (v, digits) => `$${v.toFixed(digits ? 2 : 0)}`;

// Sums of the usage lines' amounts per UTC day (the last DAYS days, zero-filled) and per cluster.
export function usageTotals(lines, now = new Date()) {
  const byDay = new Map();
  for (let i = DAYS - 1; i >= 0; i -= 1) {
    byDay.set(new Date(now.getTime() - i * 86400e3).toISOString().slice(0, 10), 0);
  }
  const byCluster = new Map();
  for (const line of lines) {
    const amount = Number(line.amount_usd);
    const day = line.period_start.slice(0, 10);
    if (byDay.has(day)) byDay.set(day, byDay.get(day) + amount);
    const owner = line.cluster_id || (line.resource_type === "volume" ? "storage" : line.resource_id);
    byCluster.set(owner, (byCluster.get(owner) || 0) + amount);
  }
  return { byDay: [...byDay], byCluster: [...byCluster].sort((a, b) => b[1] - a[1]) };
}

export async function render(main) {
  const body = h("div", { "aria-live": "polite" }, h("p", { class: "muted" }, "Loading billing…"));
  clear(main, h("div", { class: "page-head" }, h("h1", null, "Billing")), body);
  const since = new Date(Date.now() - DAYS * 86400e3).toISOString().replace(/\.\d+Z$/, "Z");
  const [balance, lines, invoices, clusters, teams] = await Promise.all([
    get("/billing/balance"), listAll("/billing/usage", { start: since }, 10000), get("/billing/invoices"),
    listAll("/clusters"), get("/billing/usage", { start: since, group_by: `label:${TEAM_LABEL}` }),
  ]);
  const names = new Map(clusters.map((c) => [c.id, c.name]));
  const totals = usageTotals(lines);
  const usd = (v) => fmt.usd(v);
  clear(body,
    h("div", { class: "cards" },
      card("Balance", balance.prepaid ? usd(balance.balance_usd) : "Pay as you go", balance.prepaid ? `of ${usd(balance.granted_usd)} granted` : null),
      card("Charged", usd(balance.charged_usd)),
      card(`Last ${DAYS} days`, usd(totals.byDay.reduce((s, [, v]) => s + v, 0))),
      card("Status", balance.exhausted ? "Credits exhausted" : "OK", balance.exhausted ? "Clusters are paused until credits are added" : null)),
    section(`Usage by day (USD, last ${DAYS} days)`, barChart({
      title: `Usage per day, last ${DAYS} days`, yFormat: money,
      bars: totals.byDay.map(([day, value]) => ({ label: day.slice(5), value })),
    })),
    section(`Usage by cluster (USD, last ${DAYS} days)`, barChart({
      title: `Usage per cluster, last ${DAYS} days`, yFormat: money,
      bars: totals.byCluster.slice(0, 12).map(([id, value]) => ({ label: names.get(id) || id, value })),
    })),
    teamSection(teams),
    section("Invoices", table([
      { label: "Period", value: (i) => i.period },
      { label: "Status", value: (i) => i.status },
      { label: "Compute", value: (i) => usd(i.compute_on_demand_usd), numeric: true },
      { label: "Reserved", value: (i) => usd(i.reserved_upfront_usd), numeric: true },
      { label: "Storage", value: (i) => usd(i.storage_usd), numeric: true },
      { label: "Total", value: (i) => usd(i.total_usd), numeric: true },
      { label: "Lines", value: (i) => fmt.int(i.line_count), numeric: true },
    ], invoices.items, { caption: "Invoices", empty: "No invoices yet." })));
}

// Usage per value of the `team` label over the same window; lines of resources without the label are
// one group of their own, so the groups add up to the total.
function teamSection(teams) {
  const teamName = (g) => (g.key === null ? `(no ${TEAM_LABEL} label)` : g.key);
  return h("section", { class: "panel", id: "usage-by-team" }, h("h2", null, `Usage by team (label ${TEAM_LABEL}, last ${DAYS} days)`),
    teams.groups.length ? barChart({
      title: `Usage per team, last ${DAYS} days`, yFormat: money,
      bars: teams.groups.slice(0, 12).map((g) => ({ label: teamName(g), value: Number(g.amount_usd) })),
    }) : null,
    table([
      { label: "Team", value: teamName },
      { label: "Amount", value: (g) => fmt.usd(g.amount_usd), numeric: true },
      { label: "Share", value: (g) => fmt.pct(Number(teams.total_usd) ? (100 * Number(g.amount_usd)) / Number(teams.total_usd) : null), numeric: true },
      { label: "Lines", value: (g) => fmt.int(g.line_count), numeric: true },
    ], teams.groups, { caption: "Usage by team", empty: "No usage in this window." }),
    h("p", { class: "muted small" }, `Total ${fmt.usd(teams.total_usd)}. Tag clusters and volumes with `,
      h("code", null, `${TEAM_LABEL}=NAME`), " to charge them to a team; ",
      h("code", null, `GET /v1/billing/usage?group_by=label:${TEAM_LABEL}&format=csv`), " exports the same figures."));
}
