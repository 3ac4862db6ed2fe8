// Small SVG charts drawn from API data: a line chart (one line per series, time axis, y grid, legend)
// and a bar chart. Colours come from CSS (series-0 ... series-7), so light and dark themes both work.

import { h, svg } from "./dom.js";

const WIDTH = 960;
const HEIGHT = 280;
const PAD = { top: 12, right: 16, bottom: 28, left: 56 };
const PALETTE = 8;

// The y axis: ticks from 0 at a 1/2/5 step (2.5 too when whole), about four intervals, and the
// decimals that keep every label distinct (flat or all-zero data: 0.0, 0.5, 1.0, never 0, 1, 1).
// `fixedTop` (100 for %) keeps the top; else it is the first tick at or above the largest value.
export function yTicks(largest, fixedTop) {
  const span = fixedTop ?? (largest > 0 ? largest : 1);
  const rough = span / 4;
  const magnitude = 10 ** Math.floor(Math.log10(rough));
  const multiples = magnitude >= 10 ? [1, 2, 2.5, 5, 10] : [1, 2, 5, 10];
  const step = multiples.map((m) => m * magnitude).find((s) => s >= rough * (1 - 1e-9));
  const top = fixedTop ?? Number((Math.ceil(span / step - 1e-9) * step).toFixed(12));
  const digits = step >= 1 ? 0 : Math.ceil(-Math.log10(step) - 1e-9);
  const ticks = [];
  for (let i = 0; i * step <= top * (1 + 1e-9); i += 1) ticks.push(Number((i * step).toFixed(digits + 2)));
  return { top, ticks, digits };
}

function yGrid(axis, y, yFormat, right) {
  return axis.ticks.map((v) => svg("g", { class: "grid" },
    svg("line", { x1: PAD.left, x2: right, y1: y(v), y2: y(v) }),
    svg("text", { class: "y-tick", x: PAD.left - 6, y: y(v) + 4, "text-anchor": "end" }, yFormat(v, axis.digits))));
}

function timeLabel(ms, spanMs) {
  const options = spanMs > 36 * 3600e3
    ? { month: "short", day: "numeric" }
    : { hour: "2-digit", minute: "2-digit", hour12: false };
  return new Date(ms).toLocaleString("en-GB", options);
}

// One entry per series: its colour, its name and, when given, its latest value.
function legend(entries) {
  return h("ul", { class: "legend" }, entries.map(([name, latest], i) =>
    h("li", null, h("span", { class: `swatch series-${i % PALETTE}`, "aria-hidden": "true" }), name,
      latest === null ? null : h("span", { class: "muted" }, ` ${latest}`))));
}

function lastValue(values) {
  for (let i = values.length - 1; i >= 0; i -= 1) if (values[i] !== null && values[i] !== undefined) return values[i];
  return null;
}

function frame(title, children) {
  return svg("svg", { class: "chart", viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": title },
    svg("title", null, title), ...children);
}

// series: [{name, values: [number|null]}], one value per timestamp; yMax fixes the scale (100 for %);
// yFormat(value, digits) writes a value (digits: the decimals the axis needs; absent for the legend).
export function lineChart({ title, timestamps, series, yMax, yFormat = (v) => String(v) }) {
  const times = timestamps.map((t) => Date.parse(t));
  const axis = yTicks(Math.max(0, ...series.flatMap((s) => s.values.filter((v) => v !== null && v !== undefined))), yMax);
  const top = axis.top;
  const x0 = times[0] ?? 0;
  const span = Math.max(1, (times[times.length - 1] ?? 1) - x0);
  const innerW = WIDTH - PAD.left - PAD.right;
  const innerH = HEIGHT - PAD.top - PAD.bottom;
  const x = (t) => PAD.left + ((t - x0) / span) * innerW;
  const y = (v) => PAD.top + innerH - (Math.min(v, top) / top) * innerH;

  const grid = yGrid(axis, y, yFormat, WIDTH - PAD.right);
  const ticks = times.length < 2 ? [] : [0, 0.25, 0.5, 0.75, 1].map((f) => {
    const t = x0 + span * f;
    const anchor = f === 0 ? "start" : f === 1 ? "end" : "middle";
    return svg("text", { class: "tick", x: x(t), y: HEIGHT - 8, "text-anchor": anchor }, timeLabel(t, span));
  });
  const lines = series.map((s, i) => {
    // Gaps (null: no sample, node down) break the line instead of dropping it to zero.
    let d = "";
    let pen = false;
    s.values.forEach((v, k) => {
      if (v === null || v === undefined || Number.isNaN(times[k])) {
        pen = false;
        return;
      }
      d += `${pen ? "L" : "M"}${x(times[k]).toFixed(1)},${y(v).toFixed(1)}`;
      pen = true;
    });
    return svg("path", { class: `line series-${i % PALETTE}`, d, "data-series": s.name }, svg("title", null, s.name));
  });
  const hasData = lines.some((p) => p.getAttribute("d"));
  const axes = [
    svg("line", { class: "axis", x1: PAD.left, x2: PAD.left, y1: PAD.top, y2: PAD.top + innerH }),
    svg("line", { class: "axis", x1: PAD.left, x2: WIDTH - PAD.right, y1: PAD.top + innerH, y2: PAD.top + innerH }),
  ];
  return h("figure", { class: "chart-figure" }, frame(title, [...grid, ...axes, ...ticks, ...lines]),
    hasData ? null : h("p", { class: "muted chart-empty" }, "No samples in this window yet."),
    legend(series.map((s) => {
      const latest = lastValue(s.values);
      return [s.name, latest === null ? null : yFormat(latest)];
    })));
}

// bars: [{label, value}], one bar each with its label under it (costs per day, per cluster).
export function barChart({ title, bars, yFormat = (v) => String(v) }) {
  const axis = yTicks(Math.max(0, ...bars.map((b) => b.value)));
  const top = axis.top;
  const innerW = WIDTH - PAD.left - PAD.right;
  const innerH = HEIGHT - PAD.top - PAD.bottom;
  const slot = innerW / Math.max(1, bars.length);
  const y = (v) => PAD.top + innerH - (v / top) * innerH;
  const grid = yGrid(axis, y, yFormat, WIDTH - PAD.right);
  const every = Math.ceil(bars.length / 10); // at most ~10 labels, so they never overlap
  const drawn = bars.map((b, i) => svg("g", null,
    svg("rect", {
      class: "bar", x: PAD.left + i * slot + slot * 0.15, width: slot * 0.7,
      y: y(b.value), height: Math.max(0, PAD.top + innerH - y(b.value)), "data-value": b.value,
    }, svg("title", null, `${b.label}: ${yFormat(b.value)}`)),
    i % every === 0
      ? svg("text", { class: "tick", x: PAD.left + (i + 0.5) * slot, y: HEIGHT - 8, "text-anchor": "middle" }, b.label)
      : null));
  const baseline = svg("line", { class: "axis", x1: PAD.left, x2: WIDTH - PAD.right, y1: PAD.top + innerH, y2: PAD.top + innerH });
  return h("figure", { class: "chart-figure" }, frame(title, [...grid, baseline, ...drawn]),
    bars.length ? null : h("p", { class: "muted chart-empty" }, "No usage recorded yet."));
}
