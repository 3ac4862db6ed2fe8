// Volumes of one cluster: the attached ones (detach) and the project's free ones in its region (attach).

import { del, listAll, post } from "../api.js";
import { clear, confirmAction, errorBox, fmt, h, notify, section, table } from "../dom.js";

export async function render(panel, context) {
  const status = h("div", { "aria-live": "polite" });
  const draw = async () => {
    const cluster = await context.reloadCluster();
    const volumes = await listAll("/volumes");
    const attached = volumes.filter((v) => cluster.volume_ids.includes(v.id));
    const free = volumes.filter((v) => !cluster.volume_ids.includes(v.id) && v.region === cluster.region);
    const choose = h("select", { id: "attach-volume" }, free.map((v) => h("option", { value: v.id }, `${v.name} (${v.size_tib} TiB)`)));
    const attach = h("button", { type: "button", class: "button primary", id: "attach-button", disabled: free.length ? null : true }, "Attach");
    attach.addEventListener("click", async () => {
      try {
        await post(`/clusters/${context.id}/volumes/${choose.value}`);
        notify("Volume attached.");
        await draw();
      } catch (error) {
        clear(status, errorBox(error));
      }
    });
    const detach = async (volume) => {
      if (!(await confirmAction(`Detach ${volume.name}?`, `Detach ${volume.name} from ${cluster.name}: it is unmounted from every node (its data stays on the volume).`, "Detach"))) return;
      try {
        await del(`/clusters/${context.id}/volumes/${volume.id}`);
        notify("Volume detached.");
        await draw();
      } catch (error) {
        clear(status, errorBox(error));
      }
    };
    clear(panel, status,
      section("Attached volumes", table([
        { label: "Name", value: (v) => v.name },
        { label: "Size", value: (v) => `${v.size_tib} TiB`, numeric: true },
        { label: "Mount path", value: (v) => h("code", null, v.mount_path) },
        { label: "Status", value: (v) => v.status },
        { label: "", value: (v) => h("button", { type: "button", class: "button small ghost", "aria-label": `Detach ${v.name}`, onclick: () => detach(v) }, "Detach") },
      ], attached, { caption: "Attached volumes", empty: "No volume attached." })),
      section("Attach a volume",
        free.length
          ? h("div", { class: "toolbar" }, h("div", { class: "field-inline" }, h("label", { for: "attach-volume" }, "Volume"), choose), attach)
          : h("p", { class: "muted" }, `No free volume in ${cluster.region}: create one on the `, h("a", { href: "#/volumes" }, "Volumes"), " page.")));
  };
  await draw();
}
