// Jobs: counters per state, filter tabs ALL/RUNNING/PENDING/COMPLETED/FAILED/UNKNOWN, the job table.

import { get, latest, STALE } from "../api.js";
import { badge, card, clear, fmt, filterTabs, h, table } from "../dom.js";

const STATES = ["all", "running", "pending", "completed", "failed", "unknown"];
const REFRESH_MS = 15000;

export async function render(panel, context) {
  let state = "all";
  const counters = h("div", { class: "cards" });
  const tabsSlot = h("div");
  const list = h("div", { "aria-live": "polite" });
  clear(panel, counters, tabsSlot, list);
  const newest = latest();
  const draw = async () => {
    const jobs = await newest(get(`/clusters/${context.id}/jobs`, { state: state === "all" ? null : state, limit: 500 }));
    if (jobs === STALE) return;
    const total = Object.values(jobs.counts).reduce((a, b) => a + b, 0);
    clear(counters, card("All", fmt.int(total)),
      STATES.slice(1).map((s) => card(s[0].toUpperCase() + s.slice(1), fmt.int(jobs.counts[s] ?? 0))));
    clear(tabsSlot, filterTabs("Job state", STATES.map((s) => [s, s.toUpperCase()]), state, (value) => {
      state = value;
      draw().then(() => tabsSlot.querySelector("[aria-selected=true]")?.focus());
    }));
    clear(list, table([
      { label: "Job ID", value: (j) => String(j.job_id), numeric: true },
      { label: "Name", value: (j) => j.name },
      { label: "User", value: (j) => j.user },
      { label: "Partition", value: (j) => j.partition },
      { label: "Nodes", value: (j) => j.nodes },
      { label: "GPUs", value: (j) => fmt.int(j.gpus), numeric: true },
      { label: "Run time", value: (j) => fmt.duration(j.run_time_seconds), numeric: true },
      { label: "Time limit", value: (j) => fmt.duration(j.time_limit_seconds), numeric: true },
      { label: "State", value: (j) => badge(j.state.toUpperCase(), j.reason) },
      { label: "Reason", value: (j) => j.reason || "" },
      { label: "Priority", value: (j) => fmt.int(j.priority), numeric: true },
    ], jobs.items, { caption: "Jobs", empty: state === "all" ? "No jobs." : `No ${state} jobs.` }));
  };
  await draw();
  const timer = setInterval(() => draw().catch(() => {}), REFRESH_MS);
  return () => clearInterval(timer);
}
