// Monitoring: GPU utilisation (and GPU memory) per node over 5m/15m/1h/6h/1d, one line per node.

import { get, latest, STALE } from "../api.js";
import { lineChart } from "../chart.js";
import { clear, filterTabs, h, section } from "../dom.js";

const WINDOWS = ["5m", "15m", "1h", "6h", "1d"];
const WINDOW_SECONDS = { "5m": 300, "15m": 900, "1h": 3600, "6h": 21600, "1d": 86400 };

// A young cluster opens on the smallest window holding its whole life, an older one on the last hour.
export function defaultWindow(createdAt, now = Date.now()) {
  const age = (now - Date.parse(createdAt)) / 1000;
  return ["5m", "15m"].find((w) => age <= WINDOW_SECONDS[w]) || "1h";
}
const REFRESH_MS = 15000;

export async function render(panel, context) {
  let range = defaultWindow(context.cluster().created_at);
  let node = "";
  const names = (context.cluster().nodes || []).map((n) => n.name);
  const select = h("select", { id: "metrics-node" },
    h("option", { value: "" }, "All nodes"), names.map((name) => h("option", { value: name }, name)));
  select.addEventListener("change", () => {
    node = select.value;
    draw();
  });
  const windowSlot = h("div");
  const charts = h("div");
  clear(panel, h("div", { class: "toolbar" }, windowSlot,
    h("div", { class: "field-inline" }, h("label", { for: "metrics-node" }, "Node"), select)), charts);
  const newest = latest();
  const draw = async () => {
    clear(windowSlot, filterTabs("Time window", WINDOWS.map((w) => [w, w]), range, (value) => {
      range = value;
      draw().then(() => windowSlot.querySelector("[aria-selected=true]")?.focus());
    }));
    const metrics = await newest(get(`/clusters/${context.id}/metrics`, { window: range, node: node || null }));
    if (metrics === STALE) return;
    clear(charts,
      section(`GPU utilisation (%), last ${range}`, lineChart({
        title: `GPU utilisation per node, last ${range}`, timestamps: metrics.timestamps, yMax: 100,
        yFormat: (v, digits = 0) => `${v.toFixed(digits)}%`,
        series: metrics.series.map((s) => ({ name: s.node, values: s.gpu_utilization_pct })),
      })),
      section(`GPU memory used (GiB), last ${range}`, lineChart({
        title: `GPU memory used per node, last ${range}`, timestamps: metrics.timestamps,
        yFormat: (v, digits = 1) => v.toFixed(digits),
        series: metrics.series.map((s) => ({
          name: s.node, values: s.gpu_memory_used_mib.map((v) => (v === null ? null : v / 1024)),
        })),
      })),
      h("p", { class: "muted small" }, `One point per ${metrics.step_seconds} s (the mean of its samples); gaps: no sample (node not up).`));
  };
  await draw();
  const timer = setInterval(() => draw().catch(() => {}), REFRESH_MS);
  return () => clearInterval(timer);
}
