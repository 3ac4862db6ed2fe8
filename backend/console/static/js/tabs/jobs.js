// Jobs: counters per Slurm state, filter tabs ALL and each state the API counts (RUNNING, PENDING,
// COMPLETED, FAILED, CANCELLED, TIMEOUT, and NODE_FAIL, COMPLETING, ... when a job is in it), the job
// table: Slurm's states, array tasks as 1234_5 (not started yet: 1234_[3-5]), a job's GPUs over all its
// nodes.

import { get, latest, STALE } from "../api.js";
import { card, clear, fmt, filterTabs, h, table } from "../dom.js";

const REFRESH_MS = 15000;
// The console's colour for each Slurm state (its badge classes); a state not named here is plain.
const TONES = {
  running: "running", completed: "completed",
  pending: "provisioning", completing: "provisioning", configuring: "provisioning", requeued: "provisioning",
  requeue_hold: "paused", requeue_fed: "provisioning", resizing: "provisioning", signaling: "provisioning",
  stage_out: "provisioning", suspended: "paused", stopped: "paused", cancelled: "paused", timeout: "paused",
  deadline: "paused", preempted: "paused", revoked: "paused", resv_del_hold: "paused", special_exit: "failed",
  failed: "failed", node_fail: "failed", boot_fail: "failed", out_of_memory: "failed", unknown: "unknown",
};

// As squeue prints a job's id: 1234_5 for task 5 of array job 1234, 1234_[3-5] for its tasks not started.
export function jobId(job) {
  if (job.array_job_id != null && job.array_task_id != null) return `${job.array_job_id}_${job.array_task_id}`;
  if (job.array_job_id != null && job.array_tasks) return `${job.array_job_id}_[${job.array_tasks}]`;
  return String(job.job_id);
}

export function stateBadge(state, reason) {
  const tone = TONES[state] ?? "other";
  return h("span", { class: `badge badge-${tone} badge-job-${state.replace(/_/g, "-")}`, title: reason }, state.toUpperCase());
}

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
    const states = Object.keys(jobs.counts);
    const total = Object.values(jobs.counts).reduce((a, b) => a + b, 0);
    clear(counters, card("All", fmt.int(total)), states.map((s) => card(s.toUpperCase(), fmt.int(jobs.counts[s]))));
    const tabs = ["all", ...states, ...(state === "all" || states.includes(state) ? [] : [state])];
    clear(tabsSlot, filterTabs("Job state", tabs.map((s) => [s, s.toUpperCase()]), state, (value) => {
      state = value;
      draw().then(() => tabsSlot.querySelector("[aria-selected=true]")?.focus());
    }));
    clear(list, table([
      { label: "Job ID", value: jobId, numeric: true },
      { label: "Name", value: (j) => j.name },
      { label: "User", value: (j) => j.user },
      { label: "Partition", value: (j) => j.partition },
      { label: "Nodes", value: (j) => j.nodes },
      { label: "GPUs", value: (j) => fmt.int(j.gpus), numeric: true },
      { label: "Run time", value: (j) => fmt.duration(j.run_time_seconds), numeric: true },
      { label: "Time limit", value: (j) => fmt.duration(j.time_limit_seconds), numeric: true },
      { label: "State", value: (j) => stateBadge(j.state, j.reason) },
      { label: "Reason", value: (j) => j.reason || "" },
      { label: "Priority", value: (j) => fmt.int(j.priority), numeric: true },
    ], jobs.items, { caption: "Jobs", empty: state === "all" ? "No jobs." : `No ${state.toUpperCase()} jobs.` }));
  };
  await draw();
  const timer = setInterval(() => draw().catch(() => {}), REFRESH_MS);
  return () => clearInterval(timer);
}
