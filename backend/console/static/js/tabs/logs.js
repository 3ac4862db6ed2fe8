// Logs: the controller's (slurmctld) or one node's last N lines, auto-refresh, download as a file.
// Lines go into a <pre> as text: a log line holding markup is shown as it is, never parsed.

import { get, latest, STALE } from "../api.js";
import { clear, errorBox, h } from "../dom.js";

const REFRESH_MS = 3000;

export async function render(panel, context) {
  const cluster = context.cluster();
  const sources = [...(cluster.orchestrator === "slurm" ? ["controller"] : []), ...(cluster.nodes || []).map((n) => n.name)];
  const source = h("select", { id: "log-source" }, sources.map((s) => h("option", { value: s }, s === "controller" ? "controller (slurmctld)" : s)));
  const tail = h("input", { id: "log-tail", type: "number", min: "1", max: "5000", value: "200", inputmode: "numeric" });
  const auto = h("input", { id: "log-auto", type: "checkbox" });
  const refresh = h("button", { type: "button", class: "button ghost", id: "log-refresh" }, "Refresh");
  const download = h("button", { type: "button", class: "button ghost", id: "log-download" }, "Download");
  const output = h("pre", { class: "log", id: "log-lines", tabindex: "0", "aria-label": "Log lines" });
  const status = h("div", { "aria-live": "polite" });
  let lines = [];
  let timer = null;

  const newest = latest();
  const load = async () => {
    if (!source.value) {
      clear(status, h("p", { class: "muted" }, "This cluster has no log sources yet."));
      return;
    }
    const n = Math.min(5000, Math.max(1, Number.parseInt(tail.value, 10) || 200));
    try {
      const answer = await newest(get(`/clusters/${context.id}/logs`, { source: source.value, tail: n }));
      if (answer === STALE) return;
      lines = answer.lines;
      const atBottom = output.scrollTop + output.clientHeight >= output.scrollHeight - 4;
      output.textContent = lines.length ? lines.join("\n") : "(no lines yet)";
      if (atBottom) output.scrollTop = output.scrollHeight;
      clear(status, h("p", { class: "muted small" }, `${lines.length} lines of ${answer.source}, read ${new Date().toLocaleTimeString("en-GB")}`));
    } catch (error) {
      clear(status, errorBox(error));
    }
  };
  const setAuto = () => {
    clearInterval(timer);
    timer = auto.checked ? setInterval(load, REFRESH_MS) : null;
  };
  source.addEventListener("change", load);
  tail.addEventListener("change", load);
  refresh.addEventListener("click", load);
  auto.addEventListener("change", setAuto);
  download.addEventListener("click", () => {
    const blob = new Blob([lines.join("\n") + "\n"], { type: "text/plain" });
    const link = h("a", { href: URL.createObjectURL(blob), download: `${cluster.name}-${source.value}.log` });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 1000);
  });
  clear(panel,
    h("div", { class: "toolbar" },
      h("div", { class: "field-inline" }, h("label", { for: "log-source" }, "Source"), source),
      h("div", { class: "field-inline" }, h("label", { for: "log-tail" }, "Last lines"), tail),
      h("div", { class: "field-inline" }, auto, h("label", { for: "log-auto" }, "Auto-refresh (every 3 s)")),
      refresh, download),
    status, output);
  await load();
  return () => clearInterval(timer);
}
