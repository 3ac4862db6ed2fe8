// Container images of one cluster: what /images/<name> holds on every node (state, short digest, size)
// and why an import failed. Redrawn every few seconds while an import is under way.

import { badge, clear, h, section, table } from "../dom.js";

const IMPORTING_REFRESH_MS = 5000;
const SETTLING = ["pending", "importing"];

// `sha256:0123456789ab`, as docker shows image ids (the whole digest in the title).
export function shortDigest(digest) {
  return digest ? digest.slice(0, 19) : null;
}

export function size(bytes) {
  if (bytes === null || bytes === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit ? `${value.toFixed(1)} ${units[unit]}` : `${bytes} B`;
}

export function importing(cluster) {
  return (cluster.images || []).some((i) => SETTLING.includes(i.state));
}

// The API's reason starts with the field (`container_images["train"]: ...`); the row already names it.
export function reasonText(image) {
  return (image.reason || "").replace(`container_images["${image.name}"]: `, "");
}

function digestCell(image) {
  const short = shortDigest(image.digest);
  return short ? h("code", { class: "nowrap", title: image.digest }, short) : "—";
}

function draw(panel, cluster) {
  const images = cluster.images || [];
  clear(panel,
    section("Container images",
      h("p", { class: "muted" }, "Each image is imported once into the cluster's shared storage and is read-only at ",
        h("code", null, "/images/<name>"), " on every node. Run a job in one with ",
        h("code", null, "srun --container=/images/<name> CMD"), "."),
      table([
        { label: "Name", value: (i) => h("code", null, `/images/${i.name}`) },
        { label: "Reference", value: (i) => h("code", { class: "reference" }, i.reference) },
        { label: "State", value: (i) => badge(i.state, i.reason) },
        { label: "Digest", value: digestCell },
        { label: "Size", value: (i) => h("span", { class: "nowrap" }, size(i.size_bytes)), numeric: true },
        { label: "Reason", value: (i) => h("span", { class: "image-reason" }, reasonText(i)) },
      ], images, { caption: "Container images", empty: "No container images: set container_images on the cluster (Terraform) or run gpucloud cluster image set." }),
      images.length ? h("p", { class: "muted", id: "image-storage" }, `Image storage: ${size(cluster.image_storage_bytes || 0)}`) : null));
}

export async function render(panel, context) {
  draw(panel, await context.reloadCluster());
  const timer = setInterval(async () => {
    if (!importing(context.cluster())) return;
    try {
      draw(panel, await context.reloadCluster());
    } catch {
      // A failed refresh keeps the last view; the next one tries again.
    }
  }, IMPORTING_REFRESH_MS);
  return () => clearInterval(timer);
}
