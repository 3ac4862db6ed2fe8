// The project's shared volumes: list, create, delete.

import { del, get, listAll, post } from "../api.js";
import { clear, confirmAction, errorBox, fmt, h, notify, section, table } from "../dom.js";

export async function render(main) {
  const status = h("div", { "aria-live": "polite" });
  const body = h("div", { class: "panel" }, h("p", { class: "muted" }, "Loading volumes…"));
  const formSlot = h("div");
  clear(main, h("div", { class: "page-head" }, h("h1", null, "Volumes")), status, body, section("Create a volume", formSlot));
  const regions = (await get("/regions")).items;
  const name = h("input", { id: "volume-name", required: true, maxlength: "128" });
  const region = h("select", { id: "volume-region" }, regions.map((r) => h("option", { value: r.name }, `${r.display_name} (${r.name})`)));
  const size = h("input", { id: "volume-size", type: "number", min: "1", value: "1", required: true, inputmode: "numeric" });
  const form = h("form", { class: "inline-form" },
    h("div", { class: "field" }, h("label", { for: "volume-name" }, "Name"), name),
    h("div", { class: "field" }, h("label", { for: "volume-region" }, "Region"), region),
    h("div", { class: "field" }, h("label", { for: "volume-size" }, "Size (TiB)"), size),
    h("button", { type: "submit", class: "button primary" }, "Create volume"));
  const draw = async () => {
    const volumes = await listAll("/volumes");
    clear(body, table([
      { label: "Name", value: (v) => v.name },
      { label: "Region", value: (v) => v.region, nowrap: true },
      { label: "Size", value: (v) => `${v.size_tib} TiB`, numeric: true },
      { label: "Status", value: (v) => v.status },
      { label: "Attached to", value: (v) => (v.attached_cluster_ids.length ? v.attached_cluster_ids.map((id) => h("a", { href: `#/clusters/${id}/volumes`, class: "block" }, id)) : "—") },
      { label: "Hourly cost", value: (v) => fmt.usd(v.estimated_hourly_cost_usd), numeric: true },
      { label: "", value: (v) => h("button", { type: "button", class: "button small ghost", "aria-label": `Delete ${v.name}`, onclick: () => remove(v) }, "Delete") },
    ], volumes, { caption: "Volumes", empty: "No volumes yet." }));
  };
  const remove = async (volume) => {
    if (!(await confirmAction(`Delete ${volume.name}?`, `Delete volume ${volume.name} and all its data. This cannot be undone.`, "Delete"))) return;
    try {
      await del(`/volumes/${volume.id}`);
      notify(`Deleted ${volume.name}.`);
      await draw();
    } catch (error) {
      clear(status, errorBox(error));
    }
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await post("/volumes", { name: name.value.trim(), region: region.value, size_tib: Number.parseInt(size.value, 10) });
      notify("Volume created.");
      form.reset();
      await draw();
    } catch (error) {
      clear(status, errorBox(error));
    }
  });
  clear(formSlot, form);
  await draw();
}
