// The cluster page's Actions menu: scale, update image (the container of a single-node cluster), restart
// workers, repair mode, delete. Each asks first (a dialog; delete wants the cluster's name typed), then
// calls the same API as every client: PATCH /v1/clusters/ID, POST .../actions, DELETE /v1/clusters/ID.
// What the API refuses (a role, autoscaling bounds, deletion protection) is shown as it answers.

import { del, patch, post } from "../api.js";
import { confirmAction, field, formDialog, h, notify } from "../dom.js";

const CONTAINERS = ["base", "pytorch"];
const REPAIR_MODES = [
  ["auto", "auto: a failed or degraded node is drained and replaced in place"],
  ["manual", "manual: it stays failed or degraded until a node action"],
];

async function scale(cluster) {
  if (cluster.autoscaling) return scaleRange(cluster);
  const count = h("input", { id: "scale-count", type: "number", min: "1", max: "4096", value: String(cluster.node_count), inputmode: "numeric", required: true });
  const ok = await formDialog({
    id: "scale-dialog", title: `Scale ${cluster.name}`, okLabel: "Scale",
    text: `${cluster.name} has ${cluster.node_count} nodes. Scaling down drains the idle nodes first, then the newest.`,
    fields: field("Node count", count),
    check: () => {
      const n = Number(count.value);
      if (!Number.isInteger(n) || n < 1 || n > 4096) return "Node count must be a whole number from 1 to 4096.";
      return n === cluster.node_count ? `${cluster.name} already has ${n} nodes: pick another count.` : null;
    },
  });
  if (!ok) return false;
  await patch(`/clusters/${cluster.id}`, { node_count: Number(count.value) });
  notify(`Scaling ${cluster.name} to ${count.value} nodes.`);
  return true;
}

// An autoscaled cluster's node count is the engine's: scaling it means moving its range.
async function scaleRange(cluster) {
  const bound = (id, value) => h("input", { id, type: "number", min: "1", max: "4096", value: String(value), inputmode: "numeric", required: true });
  const low = bound("scale-min", cluster.autoscaling.min_nodes);
  const high = bound("scale-max", cluster.autoscaling.max_nodes);
  const ok = await formDialog({
    id: "scale-dialog", title: `Scaling range of ${cluster.name}`, okLabel: "Save",
    text: `Autoscaling keeps ${cluster.name} between its fewest and most nodes (now ${cluster.node_count}).`,
    fields: [field("Fewest nodes", low), field("Most nodes", high)],
    check: () => {
      const [min, max] = [Number(low.value), Number(high.value)];
      if (![min, max].every((n) => Number.isInteger(n) && n >= 1 && n <= 4096)) return "Both bounds must be whole numbers from 1 to 4096.";
      return min > max ? "Fewest nodes must not exceed most nodes." : null;
    },
  });
  if (!ok) return false;
  await patch(`/clusters/${cluster.id}`, { autoscaling: { ...cluster.autoscaling, min_nodes: Number(low.value), max_nodes: Number(high.value) } });
  notify(`${cluster.name} now scales between ${low.value} and ${high.value} nodes.`);
  return true;
}

async function updateImage(cluster) {
  const choice = h("select", { id: "image-container" }, CONTAINERS.map((c) =>
    h("option", { value: c, selected: c === cluster.container }, c)));
  const ok = await formDialog({
    id: "image-dialog", title: `Update the image of ${cluster.name}`, okLabel: "Update",
    text: "The node's container is recreated from the new image; what runs in it stops.",
    fields: field("Container image", choice),
    check: () => (choice.value === cluster.container ? `${cluster.name} already runs ${choice.value}: pick the other image.` : null),
  });
  if (!ok) return false;
  await patch(`/clusters/${cluster.id}`, { container: choice.value });
  notify(`Updating ${cluster.name} to the ${choice.value} image.`);
  return true;
}

async function restartWorkers(cluster) {
  const ok = await confirmAction(`Restart workers of ${cluster.name}?`,
    "Every worker that reports XID errors (failed by one, or with a hardware XID in the last hour) is rebooted in place; jobs running on them are lost.", "Restart");
  if (!ok) return false;
  const answer = await post(`/clusters/${cluster.id}/actions`, { action: "restart_workers" });
  notify(answer.nodes.length ? `Restarting ${answer.nodes.join(", ")}.` : "No worker reports XID errors: nothing to restart.");
  return true;
}

async function repairMode(cluster) {
  const choice = h("select", { id: "repair-mode" }, REPAIR_MODES.map(([value, text]) =>
    h("option", { value, selected: value === cluster.node_repair }, text)));
  const ok = await formDialog({
    id: "repair-dialog", title: `Repair mode of ${cluster.name}`, okLabel: "Save",
    fields: field("Node repair", choice, "Node actions (restart, replace, drain) stay on the Nodes tab in either mode."),
    check: () => (choice.value === cluster.node_repair ? `Repair is already ${choice.value}.` : null),
  });
  if (!ok) return false;
  await patch(`/clusters/${cluster.id}`, { node_repair: choice.value });
  notify(`Node repair of ${cluster.name} is now ${choice.value}.`);
  return true;
}

async function remove(cluster) {
  const typed = h("input", { id: "delete-confirm-name", autocomplete: "off", spellcheck: "false", required: true });
  const ok = await formDialog({
    id: "delete-dialog", title: `Delete ${cluster.name}?`, okLabel: "Delete", danger: true,
    text: `Every node of ${cluster.name} is terminated and its local disks erased; attached volumes keep their data.${
      cluster.deletion_protection ? " Deletion protection is on: the API refuses until it is turned off." : ""}`,
    fields: field(`Type ${cluster.name} to confirm`, typed),
    check: () => (typed.value === cluster.name ? null
      : `The name does not match: type ${cluster.name} exactly to delete it.`),
  });
  if (!ok) return false;
  await del(`/clusters/${cluster.id}`);
  notify(`Deleting ${cluster.name}.`);
  location.hash = "#/clusters";
  return false;
}

// [name, label, run(cluster), why it is unavailable (or null)]
const ACTIONS = [
  ["scale", "Scale…", scale, () => null],
  ["image", "Update image…", updateImage, (c) => (c.container === null || c.container === undefined
    ? "Only single-node clusters run a container image" : null)],
  ["restart-workers", "Restart workers…", restartWorkers, () => null],
  ["repair", "Repair mode…", repairMode, () => null],
  ["delete", "Delete…", remove, () => null],
];

// The menu button and its list; `cluster()` reads the newest cluster, `changed()` redraws after an action.
export function actionsMenu(cluster, changed) {
  const button = h("button", { type: "button", class: "button", id: "cluster-actions", "aria-haspopup": "true", "aria-expanded": "false", "aria-controls": "cluster-actions-menu" }, "Actions ▾");
  const items = ACTIONS.map(([name, label]) => h("button", { type: "button", class: "menu-item", dataset: { action: name } }, label));
  const menu = h("div", { class: "menu-list", id: "cluster-actions-menu", hidden: true }, items);
  const wrap = h("div", { class: "menu" }, button, menu);
  const setOpen = (open) => {
    menu.hidden = !open;
    button.setAttribute("aria-expanded", String(open));
    if (!open) return;
    const current = cluster();
    ACTIONS.forEach(([, , , unavailable], i) => {
      const why = unavailable(current);
      items[i].disabled = Boolean(why);
      items[i].title = why || "";
    });
    items.find((item) => !item.disabled)?.focus();
  };
  button.addEventListener("click", () => setOpen(menu.hidden));
  wrap.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !menu.hidden) {
      setOpen(false);
      button.focus();
    }
  });
  wrap.addEventListener("focusout", (event) => {
    if (!wrap.contains(event.relatedTarget)) setOpen(false);
  });
  items.forEach((item, i) => item.addEventListener("click", async () => {
    setOpen(false);
    try {
      if (await ACTIONS[i][2](cluster())) await changed();
    } catch (error) {
      notify(`${error.message}${error.requestId ? ` (request ${error.requestId})` : ""}`, "error");
    }
  }));
  return wrap;
}
