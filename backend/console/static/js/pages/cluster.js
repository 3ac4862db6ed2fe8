// One cluster: a header (status, type, region, labels) and tabs, each drawn by its module in tabs/.
// The tab is part of the address (#/clusters/ID/nodes), so reload and back/forward keep it.

import { get } from "../api.js";
import { arrowKeys, badge, clear, errorBox, fmt, h } from "../dom.js";
import * as jobs from "../tabs/jobs.js";
import * as logs from "../tabs/logs.js";
import * as monitoring from "../tabs/monitoring.js";
import * as network from "../tabs/network.js";
import * as nodes from "../tabs/nodes.js";
import * as overview from "../tabs/overview.js";
import * as volumes from "../tabs/volumes.js";
import { labelChips } from "./clusters.js";

const TABS = [
  ["overview", "Overview", overview],
  ["jobs", "Jobs", jobs],
  ["monitoring", "Monitoring", monitoring],
  ["nodes", "Nodes", nodes],
  ["logs", "Logs", logs],
  ["volumes", "Volumes", volumes],
  ["network", "Network & SSH", network],
];
const HEADER_REFRESH_MS = 10000;

let page = null; // {id, header, tablist, panel, cluster, tabCleanup}

function drawHeader(header, cluster) {
  clear(header,
    h("p", { class: "crumbs" }, h("a", { href: "#/clusters" }, "Clusters"), " / "),
    h("div", { class: "page-head" },
      h("h1", { id: "cluster-name" }, cluster.name),
      badge(cluster.status, cluster.status_reason),
      cluster.phase ? h("span", { class: "muted" }, cluster.phase) : null),
    h("p", { class: "facts" },
      h("span", null, cluster.instance_type, " × ", cluster.node_count),
      h("span", null, fmt.int(cluster.num_gpus), " GPUs ", cluster.gpu_type ? `(${cluster.gpu_type})` : ""),
      h("span", null, cluster.region),
      h("span", null, cluster.orchestrator),
      h("span", null, fmt.usd(cluster.estimated_hourly_cost_usd), "/h"),
      h("code", { class: "muted" }, cluster.id)),
    cluster.status_reason ? h("p", { class: "warning" }, cluster.status_reason) : null,
    labelChips(cluster.labels));
}

function selectTab(name) {
  for (const button of page.tablist.querySelectorAll("[role=tab]")) {
    const selected = button.dataset.value === name;
    button.setAttribute("aria-selected", String(selected));
    button.tabIndex = selected ? 0 : -1;
    if (selected) page.panel.setAttribute("aria-labelledby", button.id);
  }
}

let tabGeneration = 0;

// Each tab draws into a fresh element, so a tab still loading when another is picked draws nowhere.
async function showTab(name) {
  if (page.tabCleanup) page.tabCleanup();
  page.tabCleanup = null;
  const tab = TABS.find(([value]) => value === name) || TABS[0];
  selectTab(tab[0]);
  const view = h("div", null, h("p", { class: "muted" }, "Loading…"));
  clear(page.panel, view);
  const mine = ++tabGeneration;
  const owner = page;
  const context = {
    id: owner.id,
    cluster: () => owner.cluster,
    reloadCluster: async () => {
      owner.cluster = await get(`/clusters/${owner.id}`);
      drawHeader(owner.header, owner.cluster);
      return owner.cluster;
    },
  };
  try {
    const cleanup = await tab[2].render(view, context);
    if (typeof cleanup !== "function") return;
    if (mine === tabGeneration && page === owner) owner.tabCleanup = cleanup;
    else cleanup();
  } catch (error) {
    clear(view, errorBox(error));
  }
}

function tabInAddress() {
  return (location.hash.match(/^#\/clusters\/[a-z0-9_]+\/([a-z-]+)/) || [])[1] || "overview";
}

export async function render(main, [id, tabName], { samePage }) {
  if (samePage && page && page.id === id && main.contains(page.panel)) {
    if (page.cluster) await showTab(tabName || "overview"); // else the loading render shows it
    return teardown;
  }
  const header = h("div", { class: "cluster-head" }, h("p", { class: "muted" }, "Loading cluster…"));
  const buttons = TABS.map(([value, label]) => h("button", {
    type: "button", role: "tab", id: `tab-${value}`, class: "tab", "aria-controls": "cluster-panel",
    "aria-selected": "false", tabindex: "-1", dataset: { value },
    onclick: () => { location.hash = `#/clusters/${id}/${value}`; },
  }, label));
  const tablist = h("div", { class: "tabs", role: "tablist", "aria-label": "Cluster sections" }, buttons);
  tablist.addEventListener("keydown", (event) => arrowKeys(event, buttons));
  const panel = h("div", { id: "cluster-panel", class: "tab-panel", role: "tabpanel", tabindex: "0" });
  clear(main, header, tablist, panel);
  const current = { id, header, tablist, panel, cluster: null, tabCleanup: null, timer: null };
  page = current;
  try {
    current.cluster = await get(`/clusters/${id}`);
  } catch (error) {
    if (page === current) clear(main, h("p", { class: "crumbs" }, h("a", { href: "#/clusters" }, "Clusters")), errorBox(error));
    return teardown;
  }
  if (page !== current) return () => {}; // the user left while it loaded
  drawHeader(header, current.cluster);
  current.timer = setInterval(async () => {
    try {
      current.cluster = await get(`/clusters/${id}`);
      drawHeader(header, current.cluster);
    } catch {
      // A failed refresh keeps the last view; the next one tries again.
    }
  }, HEADER_REFRESH_MS);
  await showTab(tabInAddress());
  return teardown;
}

function teardown() {
  // Runs before the next route: a tab switch on the same cluster keeps the page (render reuses it).
  const next = location.hash.match(/^#\/clusters\/([a-z0-9_]+)/);
  if (page && next && next[1] === page.id) return;
  if (page) {
    clearInterval(page.timer);
    if (page.tabCleanup) page.tabCleanup();
  }
  page = null;
}
