// One cluster: a header (status, type, region, labels) and tabs, each drawn by its module in tabs/.
// The tab is part of the address (#/clusters/ID/nodes), so reload and back/forward keep it.

import { get } from "../api.js";
import { clusterTags, relatedOf } from "../cluster-related.js";
import { arrowKeys, badge, clear, errorBox, fmt, h } from "../dom.js";
import * as images from "../tabs/images.js";
import * as jobs from "../tabs/jobs.js";
import * as logs from "../tabs/logs.js";
import * as monitoring from "../tabs/monitoring.js";
import * as network from "../tabs/network.js";
import * as nodes from "../tabs/nodes.js";
import * as overview from "../tabs/overview.js";
import * as volumes from "../tabs/volumes.js";
import { actionsMenu } from "./cluster-actions.js";
import { labelChips } from "./clusters.js";

const TABS = [
  ["overview", "Overview", overview],
  ["jobs", "Jobs", jobs],
  ["monitoring", "Monitoring", monitoring],
  ["nodes", "Nodes", nodes],
  ["logs", "Logs", logs],
  ["volumes", "Volumes", volumes],
  ["images", "Images", images],
  ["network", "Network & SSH", network],
];
const HEADER_REFRESH_MS = 10000;

let page = null; // {id, header, headSlots, tablist, panel, cluster, related, menu, tabCleanup}

// The header is redrawn on every refresh, all but the Actions menu: it stays in the page, so an open
// menu (and the focus in it) survives a refresh.
function drawHeader(owner) {
  const { cluster, related } = owner;
  if (!owner.headSlots) {
    owner.headSlots = { title: h("div", { class: "contents" }), details: h("div") };
    clear(owner.header,
      h("p", { class: "crumbs" }, h("a", { href: "#/clusters" }, "Clusters"), " / "),
      h("div", { class: "page-head" }, owner.headSlots.title, h("div", { class: "page-actions" }, owner.menu)),
      owner.headSlots.details);
  }
  clear(owner.headSlots.title,
    h("h1", { id: "cluster-name" }, cluster.name),
    badge(cluster.status, cluster.status_reason),
    cluster.phase ? h("span", { class: "muted" }, cluster.phase) : null);
  clear(owner.headSlots.details,
    h("p", { class: "facts" },
      h("span", { class: "nowrap" }, cluster.instance_type, " × ", cluster.node_count),
      h("span", { class: "nowrap" }, fmt.int(cluster.num_gpus), " GPUs ", cluster.gpu_type ? `(${cluster.gpu_type})` : ""),
      h("span", { class: "nowrap", dataset: { fact: "region" } }, cluster.region),
      h("span", { class: "nowrap" }, cluster.orchestrator),
      h("span", { class: "nowrap" }, fmt.usd(cluster.estimated_hourly_cost_usd), "/h"),
      h("code", { class: "muted nowrap" }, cluster.id)),
    clusterTags(cluster, related),
    cluster.status_reason ? h("p", { class: "warning" }, cluster.status_reason) : null,
    images.importing(cluster) ? h("p", { class: "muted", id: "importing-images" }, "Importing images: ",
      cluster.images.filter((i) => i.state !== "ready").map((i) => `${i.name} (${i.state})`).join(", ")) : null,
    labelChips(cluster.labels));
}

// Reads the cluster and, when its groups or reserved IP changed (or never read), what they name.
async function reload(owner) {
  const cluster = await get(`/clusters/${owner.id}`);
  const names = JSON.stringify([cluster.security_group_ids, cluster.reserved_ip_id]);
  if (!owner.related || names !== owner.relatedOf) {
    owner.related = await relatedOf(cluster).catch(() => owner.related);
    owner.relatedOf = names;
  }
  owner.cluster = cluster;
  drawHeader(owner);
  return cluster;
}

// Keeps the selected tab visible in a row narrower than its tabs (phone width), clear of the hints.
function revealTab(tablist, button) {
  const margin = 32;
  const left = button.offsetLeft;
  const right = left + button.offsetWidth;
  if (left - margin < tablist.scrollLeft) tablist.scrollLeft = Math.max(0, left - margin);
  else if (right + margin > tablist.scrollLeft + tablist.clientWidth) tablist.scrollLeft = right + margin - tablist.clientWidth;
}

// The tab row scrolls sideways when it is wider than the page; a fade with an arrow on each side that
// has more tabs says so (and scrolls on click).
function tabStrip(tablist) {
  const more = (side) => h("button", {
    type: "button", class: `tabs-more tabs-more-${side}`, tabindex: "-1", "aria-hidden": "true",
    onclick: () => tablist.scrollBy({ left: (side === "left" ? -0.7 : 0.7) * tablist.clientWidth }),
  }, side === "left" ? "‹" : "›");
  const strip = h("div", { class: "tab-strip" }, tablist, more("left"), more("right"));
  const update = () => {
    strip.classList.toggle("more-left", tablist.scrollLeft > 1);
    strip.classList.toggle("more-right", tablist.scrollLeft + tablist.clientWidth < tablist.scrollWidth - 1);
  };
  tablist.addEventListener("scroll", update, { passive: true });
  // A narrower row (a rotated phone, a vertical scrollbar appearing as the tab loads) may push the
  // selected tab out again.
  new ResizeObserver(() => {
    const chosen = tablist.querySelector("[aria-selected=true]");
    if (chosen) revealTab(tablist, chosen);
    update();
  }).observe(tablist);
  return strip;
}

function selectTab(name) {
  for (const button of page.tablist.querySelectorAll("[role=tab]")) {
    const selected = button.dataset.value === name;
    button.setAttribute("aria-selected", String(selected));
    button.tabIndex = selected ? 0 : -1;
    if (selected) {
      page.panel.setAttribute("aria-labelledby", button.id);
      revealTab(page.tablist, button);
    }
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
    reloadCluster: () => reload(owner),
    related: () => owner.related,
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
  clear(main, header, tabStrip(tablist), panel);
  const current = { id, header, tablist, panel, cluster: null, related: null, relatedOf: null, headSlots: null, tabCleanup: null, timer: null };
  current.menu = actionsMenu(() => current.cluster, () => reload(current));
  page = current;
  try {
    await reload(current);
  } catch (error) {
    if (page === current) clear(main, h("p", { class: "crumbs" }, h("a", { href: "#/clusters" }, "Clusters")), errorBox(error));
    return teardown;
  }
  if (page !== current) return () => {}; // the user left while it loaded
  current.timer = setInterval(async () => {
    try {
      await reload(current);
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
