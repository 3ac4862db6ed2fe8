// Nodes: summary cards, filters All/Failed/XID errors/Healthy, one card per node with restart/replace/
// drain (or resume) behind a confirmation, a per-GPU drill-down and the node's history (its events,
// read when opened).

import { get, latest, post, STALE } from "../api.js";
import { badge, card, clear, confirmAction, errorBox, fmt, filterTabs, h, notify, table } from "../dom.js";

const FILTERS = [["all", "All"], ["failed", "Failed"], ["xid", "XID errors"], ["healthy", "Healthy"]];
const REFRESH_MS = 15000;
const ACTION_TEXT = {
  restart: (node) => `${node} is rebooted in place; jobs running on it are lost.`,
  replace: (node) => `${node} moves to a new machine under the same hostname and address; jobs running on it are lost.`,
  drain: (node) => `No new jobs land on ${node}; jobs running on it finish.`,
  resume: (node) => `New jobs may land on ${node} again.`,
};

function mean(values) {
  const known = values.filter((v) => v !== null && v !== undefined);
  return known.length ? known.reduce((a, b) => a + b, 0) / known.length : null;
}

function gpuTable(gpus) {
  return table([
    { label: "GPU", value: (g) => String(g.index), numeric: true },
    { label: "Model", value: (g) => g.name },
    { label: "Util", value: (g) => fmt.pct(g.utilization_pct), numeric: true },
    { label: "Memory", value: (g) => `${fmt.gib(g.memory_used_mib)} / ${fmt.gib(g.memory_total_mib)}`, numeric: true },
    { label: "Temp", value: (g) => (g.temperature_c === null ? "—" : `${g.temperature_c} °C`), numeric: true },
    { label: "Power", value: (g) => (g.power_draw_w === null ? "—" : `${Math.round(g.power_draw_w)} / ${Math.round(g.power_limit_w)} W`), numeric: true },
    { label: "SM clock", value: (g) => (g.sm_clock_mhz === null ? "—" : `${g.sm_clock_mhz} MHz`), numeric: true },
    { label: "ECC uncorr.", value: (g) => fmt.int(g.ecc_volatile_uncorrected), numeric: true },
    { label: "Remapped rows", value: (g) => `${fmt.int(g.remapped_rows_uncorrectable)}${g.remapped_rows_pending ? " (pending)" : ""}`, numeric: true },
    { label: "PCI bus", value: (g) => h("code", null, g.pci_bus_id) },
  ], gpus, { caption: "GPUs" });
}

const HISTORY_PAGE = 20;

function eventKind(e) {
  return e.code === null ? e.kind : `${e.kind} ${e.code}`;
}

function historyDrill(clusterId, node) {
  const body = h("div", null, h("p", { class: "muted" }, "Loading…"));
  const load = async () => {
    try {
      const page = await get(`/clusters/${clusterId}/nodes/${encodeURIComponent(node.name)}/events`, { page_size: HISTORY_PAGE });
      clear(body, table([
        { label: "Time", value: (e) => fmt.time(e.at) },
        { label: "Event", value: eventKind },
        { label: "Instance", value: (e) => (e.instance_id ? h("code", null, e.instance_id) : "—") },
        { label: "By", value: (e) => e.actor },
        { label: "Detail", value: (e) => e.detail },
      ], page.items, { caption: `History of ${node.name}`, empty: "Nothing has happened to this node yet." }),
      page.next_page_token ? h("p", { class: "muted small" }, `The newest ${HISTORY_PAGE} events; \`gpucloud nodes ${clusterId} --history ${node.name} --limit 500\` lists more.`) : null);
    } catch (error) {
      clear(body, errorBox(error));
    }
  };
  return h("details", { class: "drill", dataset: { drill: "history" }, ontoggle: (event) => { if (event.target.open) load(); } },
    h("summary", null, "History"), body);
}

function nodeCard(node, act, clusterId) {
  const gpus = node.gpus || [];
  const utilisation = mean(gpus.map((g) => g.utilization_pct));
  const actions = node.drained ? ["restart", "replace", "resume"] : ["restart", "replace", "drain"];
  return h("article", { class: `node-card health-${node.health}`, "aria-labelledby": `node-${node.name}`, dataset: { node: node.name } },
    h("header", null,
      h("h3", { id: `node-${node.name}` }, node.name),
      badge(node.health, node.health_reason),
      node.orchestrator_state ? badge(node.orchestrator_state) : null),
    h("dl", { class: "node-facts" },
      h("dt", null, "Role"), h("dd", null, node.role),
      h("dt", null, "Status"), h("dd", null, node.status),
      h("dt", null, "Instance"), h("dd", null, h("code", null, node.instance_id)),
      h("dt", null, "GPU util"), h("dd", null, fmt.pct(utilisation)),
      h("dt", null, "XID events"), h("dd", null, fmt.int(node.xid_events.length)),
      node.pending_action ? [h("dt", null, "Pending"), h("dd", null, node.pending_action)] : null),
    node.health_reason ? h("p", { class: "warning small" }, node.health_reason) : null,
    node.last_event ? h("p", { class: "muted small", dataset: { lastEvent: node.last_event.kind } },
      `Last event: ${eventKind(node.last_event)}, ${fmt.time(node.last_event.at)}`) : null,
    h("div", { class: "node-actions" }, actions.map((action) => h("button", {
      type: "button", class: `button small ${action === "replace" ? "danger" : "ghost"}`,
      dataset: { action }, "aria-label": `${action} ${node.name}`, disabled: node.pending_action ? true : null,
      onclick: () => act(node, action),
    }, action[0].toUpperCase() + action.slice(1)))),
    h("details", { class: "drill", dataset: { drill: "gpus" } },
      h("summary", null, gpus.length ? `GPUs (${gpus.length})` : "GPUs"),
      gpus.length ? gpuTable(gpus) : h("p", { class: "muted" }, node.gpus_unavailable_reason || "No GPU readings."),
      node.xid_events.length ? table([
        { label: "XID", value: (e) => String(e.code), numeric: true },
        { label: "GPU", value: (e) => (e.gpu_index === null ? "—" : String(e.gpu_index)) },
        { label: "Meaning", value: (e) => e.meaning },
        { label: "Detail", value: (e) => e.detail },
        { label: "Logged", value: (e) => fmt.time(e.logged_at) },
      ], node.xid_events, { caption: "XID events" }) : null),
    historyDrill(clusterId, node));
}

export async function render(panel, context) {
  let filter = "all";
  const cards = h("div", { class: "cards" });
  const filterSlot = h("div");
  const list = h("div", { class: "node-grid", "aria-live": "polite" });
  const status = h("div");
  const restartWorkers = h("button", { type: "button", class: "button ghost", id: "restart-workers" },
    "Restart workers with XID errors");
  restartWorkers.addEventListener("click", async () => {
    if (!(await confirmAction("Restart workers with XID errors?", "Every worker that reports XID errors (failed by one, or with a hardware XID in the last hour) is rebooted in place; jobs running on them are lost.", "Restart"))) return;
    try {
      const answer = await post(`/clusters/${context.id}/actions`, { action: "restart_workers" });
      notify(answer.nodes.length ? `Restarting ${answer.nodes.join(", ")}.` : "No worker reports XID errors: nothing to restart.");
      await draw();
    } catch (error) {
      clear(status, errorBox(error));
    }
  });
  clear(panel, cards, h("div", { class: "toolbar" }, filterSlot, restartWorkers), status, list);

  const act = async (node, action) => {
    const ok = await confirmAction(`${action[0].toUpperCase() + action.slice(1)} ${node.name}?`,
      ACTION_TEXT[action](node.name), action[0].toUpperCase() + action.slice(1));
    if (!ok) return;
    try {
      await post(`/clusters/${context.id}/nodes/${node.name}/actions`, { action });
      notify(`${action} requested for ${node.name}.`);
      await draw();
    } catch (error) {
      clear(status, errorBox(error));
    }
  };

  const newest = latest();
  const draw = async () => {
    const nodes = await newest(get(`/clusters/${context.id}/nodes`, { health: filter === "all" ? null : filter }));
    if (nodes === STALE) return;
    const total = Object.values(nodes.counts).reduce((a, b) => a + b, 0);
    clear(cards, card("Nodes", fmt.int(total)), card("Healthy", fmt.int(nodes.counts.healthy)),
      card("Degraded", fmt.int(nodes.counts.degraded)), card("Failed", fmt.int(nodes.counts.failed)),
      card("Repairing", fmt.int(nodes.counts.repairing)), card("Unreachable", fmt.int(nodes.counts.unreachable)));
    clear(filterSlot, filterTabs("Node filter", FILTERS, filter, (value) => {
      filter = value;
      draw().then(() => filterSlot.querySelector("[aria-selected=true]")?.focus());
    }));
    const drillOf = (d) => `${d.closest("[data-node]").dataset.node}/${d.dataset.drill}`;
    const open = new Set([...list.querySelectorAll("details[open]")].map(drillOf));
    clear(list, nodes.items.length ? nodes.items.map((n) => nodeCard(n, act, context.id)) : h("p", { class: "muted" }, "No nodes match."));
    for (const d of list.querySelectorAll("details")) if (open.has(drillOf(d))) d.open = true;
  };
  await draw();
  const timer = setInterval(() => draw().catch(() => {}), REFRESH_MS);
  return () => clearInterval(timer);
}
