// The project's host pools (its own servers, reached over SSH): a list with how many hosts are ready, and
// one pool's hosts with each host's status, the reason it is not ready (cause and fix) and its inventory.
// Pools are written with Terraform, the CLI or the API; the console shows them.

import { get, latest, listAll, STALE } from "../api.js";
import { badge, clear, copyButton, errorBox, fmt, h, section, table } from "../dom.js";
import { labelChips } from "./clusters.js";

const LIST_REFRESH_MS = 10000;
const POOL_REFRESH_MS = 5000; // a check ends within seconds of a create or a probe
const WRITTEN_ELSEWHERE =
  "Pools are created and changed with Terraform (gpucloud_host_pool), the CLI (gpucloud host-pool) or POST /v1/host-pools; the console shows them.";

export function render(main, params) {
  return params[0] ? renderPool(main, params[0]) : renderList(main);
}

// "8 × NVIDIA H200", "no GPU", or null before the first inventory.
export function gpuSummary(inventory) {
  if (!inventory) return null;
  if (!inventory.gpu_count) return "no GPU";
  return `${inventory.gpu_count} × ${inventory.gpu_model || "GPU"}`;
}

function hostAddress(host) {
  return host.address.includes(":") ? `[${host.address}]:${host.port}` : `${host.address}:${host.port}`;
}

// Redraws with `draw` every `ms` and stops when the page is left; answers that arrive after a newer
// request (a slow refresh) are dropped.
async function refreshing(body, load, draw, ms) {
  const newest = latest();
  const tick = async () => {
    try {
      const value = await newest(load());
      if (value !== STALE) draw(value);
    } catch (error) {
      clear(body, errorBox(error));
    }
  };
  await tick();
  const timer = setInterval(tick, ms);
  return () => clearInterval(timer);
}

async function renderList(main) {
  const body = h("div", { class: "panel", "aria-live": "polite" }, h("p", { class: "muted" }, "Loading host pools…"));
  clear(main, h("div", { class: "page-head" }, h("h1", null, "Host pools")),
    h("p", { class: "muted" }, "Servers you run yourself, reached by the backend over SSH with the pool's key: each host is checked (login, sudo, OS, packages, clock) and inventoried within seconds of a change and every 5 minutes. ", WRITTEN_ELSEWHERE),
    body);
  return refreshing(body, () => listAll("/host-pools"), (pools) => clear(body, table([
    { label: "Name", value: (p) => h("div", null, h("a", { href: `#/host-pools/${p.id}`, class: "strong" }, p.name), labelChips(p.labels)) },
    { label: "Region", value: (p) => p.region, nowrap: true },
    { label: "Status", value: (p) => badge(p.status) },
    { label: "Ready hosts", value: (p) => `${fmt.int(p.ready_hosts)} / ${fmt.int(p.hosts.length)}`, numeric: true, nowrap: true },
    { label: "Free", value: (p) => fmt.int(p.free_hosts), numeric: true },
    { label: "SSH user", value: (p) => h("code", null, p.ssh_user) },
    { label: "Created", value: (p) => fmt.time(p.created_at), nowrap: true },
  ], pools, { caption: "Host pools", empty: "No host pools yet: create one with Terraform, gpucloud host-pool create or POST /v1/host-pools." })), LIST_REFRESH_MS);
}

async function renderPool(main, id) {
  const head = h("div");
  const body = h("div", { "aria-live": "polite" }, h("p", { class: "muted" }, "Loading the host pool…"));
  clear(main, h("p", { class: "crumbs" }, h("a", { href: "#/host-pools" }, "Host pools"), " / "), head, body);
  return refreshing(body, () => get(`/host-pools/${encodeURIComponent(id)}`), (pool) => {
    clear(head, poolHeader(pool));
    clear(body, hostsSection(pool), connectionSection(pool));
  }, POOL_REFRESH_MS);
}

function poolHeader(pool) {
  return [
    h("div", { class: "page-head" }, h("h1", { id: "host-pool-name" }, pool.name), badge(pool.status)),
    h("p", { class: "facts" },
      h("span", { class: "nowrap", dataset: { fact: "region" } }, pool.region),
      h("span", { class: "nowrap" }, `${fmt.int(pool.ready_hosts)} of ${fmt.int(pool.hosts.length)} hosts ready`),
      h("span", { class: "nowrap" }, `${fmt.int(pool.free_hosts)} free`),
      h("code", { class: "muted nowrap" }, pool.id)),
    labelChips(pool.labels),
    h("p", { class: "muted small" }, WRITTEN_ELSEWHERE),
  ];
}

function hostsSection(pool) {
  return section("Hosts", table([
    { label: "Host", value: (host) => h("div", null, h("code", { class: "nowrap" }, hostAddress(host)),
      host.inventory ? h("div", { class: "muted small" }, host.inventory.hostname) : null) },
    { label: "Status", value: (host) => badge(host.status, host.reason_code) },
    { label: "Reason", value: (host) => (host.reason
      ? h("div", null, host.reason_code ? h("code", { class: "small" }, host.reason_code) : null, h("div", null, host.reason))
      : "—") },
    { label: "GPUs", value: (host) => gpuSummary(host.inventory) || "—" },
    { label: "CPUs", value: (host) => fmt.int(host.inventory ? host.inventory.cpu_count : null), numeric: true },
    { label: "Memory", value: (host) => fmt.gib(host.inventory ? host.inventory.memory_mib : null), numeric: true, nowrap: true },
    { label: "Interconnect", value: (host) => interconnect(host.inventory) },
    { label: "OS", value: (host) => (host.inventory ? osText(host.inventory) : "—") },
    { label: "Accounting", value: accounting },
    { label: "Init", value: initSystem },
    { label: "Cluster", value: holder },
    { label: "Checked", value: (host) => fmt.time(host.checked_at), nowrap: true },
  ], pool.hosts, { caption: "Hosts", empty: "No hosts." }));
}

// Whether a cluster whose controller the host is keeps Slurm accounting, and why not.
function accounting(host) {
  const inventory = host.inventory;
  if (!inventory) return "—";
  if (inventory.accounting) return "yes";
  return h("span", { class: "muted", title: inventory.mariadb_in_use
    ? "A MariaDB of the host's own runs: it holds the socket the cluster's accounting database would use"
    : "slurmdbd or MariaDB is not installed (install_packages installs them)" }, "no");
}

// How a cluster's daemons run on the host: as systemd units, or as detached processes without systemd.
function initSystem(host) {
  const init = host.inventory ? host.inventory.init : null;
  if (!init) return "—";
  return h("span", { title: init === "systemd"
    ? "A cluster's daemons run as systemd units (gpucloud-slurmd.service...)"
    : "No systemd: a cluster's daemons run as detached processes" }, init);
}

// The cluster whose node the host is (a link to it, with the node's name), "free" for a ready host no
// cluster holds, "—" for one that cannot be taken.
function holder(host) {
  if (host.cluster_id) {
    return h("div", null, h("a", { href: `#/clusters/${encodeURIComponent(host.cluster_id)}/overview` }, h("code", null, host.cluster_id)),
      host.node ? h("div", { class: "muted small" }, host.node) : null);
  }
  return host.status === "ready" ? "free" : "—";
}

function interconnect(inventory) {
  if (!inventory) return "—";
  const devices = inventory.interconnect_devices || [];
  return h("div", null, inventory.interconnect, devices.length ? h("div", { class: "muted small" }, devices.join(", ")) : null);
}

function osText(inventory) {
  return h("div", null, inventory.os || "—",
    h("div", { class: "muted small" }, [inventory.kernel, inventory.arch, inventory.init === "systemd" ? "systemd" : "no systemd"].filter(Boolean).join(" · ")));
}

function connectionSection(pool) {
  const port = `port ${pool.ssh_port}`;
  return section("Connection",
    h("dl", { class: "facts-list" },
      h("dt", null, "Login"), h("dd", null, h("code", null, pool.ssh_user), ` (${port}, unless a host names its own)`),
      h("dt", null, "Proxy jump"), h("dd", null, pool.proxy_jump ? h("code", null, pool.proxy_jump) : "—"),
      h("dt", null, "Key"), h("dd", null, h("code", { class: "fingerprint" }, pool.ssh_key_fingerprint)),
      h("dt", null, "Shared storage"), h("dd", null, pool.shared_storage_path ? h("code", null, pool.shared_storage_path) : "—"),
      h("dt", null, "Install packages"), h("dd", null, pool.install_packages ? "yes (with the host's apt-get or dnf)" : "no (missing ones are reported)")),
    h("p", null, "Append this line to ~/.ssh/authorized_keys of ", h("code", null, pool.ssh_user), " on every host:"),
    h("div", { class: "command" }, h("code", { id: "host-pool-public-key" }, pool.ssh_public_key), copyButton(pool.ssh_public_key)));
}
