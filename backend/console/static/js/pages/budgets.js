// Budgets: this month's spend against each budget's amount, its alert thresholds (crossed ones marked)
// and the alerts raised, with what happens at 100 % (notify, or block new clusters).

import { listAll } from "../api.js";
import { clear, fmt, h, meter, table } from "../dom.js";

// The figures of one budget: spent share of the amount and the thresholds crossed this month.
export function budgetStatus(budget) {
  const amount = Number(budget.amount_usd);
  const spent = Number(budget.spent_usd);
  const percent = amount > 0 ? (100 * spent) / amount : null;
  const crossed = new Set(budget.alerts.filter((a) => a.period === budget.period).map((a) => a.threshold_percent));
  return { amount, spent, percent, crossed };
}

function thresholds(budget, status) {
  return h("ul", { class: "chips" }, budget.thresholds.map((t) => h("li", {
    class: `chip${status.crossed.has(t) ? " chip-alert" : ""}`, dataset: { threshold: String(t) },
    title: status.crossed.has(t) ? `crossed in ${budget.period}` : "not crossed this month",
  }, `${t}%${status.crossed.has(t) ? " ✓" : ""}`)));
}

function alerts(budget) {
  if (!budget.alerts.length) return h("span", { class: "muted" }, "none");
  return h("ul", { class: "rules" }, budget.alerts.slice(-5).reverse().map((a) =>
    h("li", null, `${a.threshold_percent}% in ${a.period} at ${fmt.usd(a.spent_usd)} `, h("span", { class: "muted small" }, fmt.time(a.raised_at)))));
}

export async function render(main) {
  const body = h("div", { class: "panel" }, h("p", { class: "muted" }, "Loading budgets…"));
  clear(main, h("div", { class: "page-head" }, h("h1", null, "Budgets")),
    h("p", { class: "muted" }, "Monthly amounts for the project or for the clusters carrying one label; each threshold raises one alert a month."),
    body);
  const budgets = await listAll("/budgets");
  clear(body, table([
    { label: "Name", value: (b) => h("span", { class: "strong" }, b.name) },
    { label: "Scope", value: (b) => (b.label_filter ? h("code", null, `${b.label_filter.key}=${b.label_filter.value}`) : "project") },
    { label: `Spent this month`, value: (b) => {
      const s = budgetStatus(b);
      const text = `${fmt.usd(s.spent)} of ${fmt.usd(s.amount)} (${fmt.pct(s.percent)})`;
      return h("div", { class: s.percent >= 100 ? "over-budget" : null, dataset: { percent: String(Math.round(s.percent ?? 0)) } },
        meter(s.spent, s.amount, text), h("span", { class: "muted small" }, b.period));
    } },
    { label: "Thresholds", value: (b) => thresholds(b, budgetStatus(b)) },
    { label: "At 100 %", value: (b) => (b.action === "block_new" ? "block new clusters" : "notify") },
    { label: "Alerts", value: alerts },
  ], budgets, { caption: "Budgets", empty: "No budgets yet: set one with Terraform or POST /v1/budgets." }));
}
