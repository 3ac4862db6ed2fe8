// The project's SSH keys (the public halves installed on clusters): list, add, delete.

import { del, listAll, post } from "../api.js";
import { clear, confirmAction, errorBox, fmt, h, notify, section, table } from "../dom.js";

export async function render(main) {
  const status = h("div", { "aria-live": "polite" });
  const body = h("div", { class: "panel" });
  const name = h("input", { id: "key-name", required: true, maxlength: "128" });
  const publicKey = h("textarea", { id: "key-public", required: true, rows: "3", spellcheck: "false", placeholder: "ssh-ed25519 AAAA… you@laptop" });
  const form = h("form", { class: "stack-form" },
    h("div", { class: "field" }, h("label", { for: "key-name" }, "Name"), name),
    h("div", { class: "field" }, h("label", { for: "key-public" }, "Public key (the .pub file)"), publicKey),
    h("button", { type: "submit", class: "button primary" }, "Add key"));
  const draw = async () => {
    const keys = await listAll("/ssh-keys");
    clear(body, table([
      { label: "Name", value: (k) => k.name },
      { label: "Type", value: (k) => k.key_type },
      { label: "Fingerprint", value: (k) => h("code", null, k.fingerprint) },
      { label: "Comment", value: (k) => k.public_key.split(" ").slice(2).join(" ") },
      { label: "Added", value: (k) => fmt.time(k.created_at) },
      { label: "", value: (k) => h("button", { type: "button", class: "button small ghost", "aria-label": `Delete ${k.name}`, onclick: () => remove(k) }, "Delete") },
    ], keys, { caption: "SSH keys", empty: "No SSH keys yet." }));
  };
  const remove = async (key) => {
    if (!(await confirmAction(`Delete ${key.name}?`, `Delete SSH key ${key.name}. Clusters already created keep it installed.`, "Delete"))) return;
    try {
      await del(`/ssh-keys/${key.id}`);
      notify(`Deleted ${key.name}.`);
      await draw();
    } catch (error) {
      clear(status, errorBox(error));
    }
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await post("/ssh-keys", { name: name.value.trim(), public_key: publicKey.value.trim() });
      notify("Key added.");
      form.reset();
      await draw();
    } catch (error) {
      clear(status, errorBox(error));
    }
  });
  clear(main, h("div", { class: "page-head" }, h("h1", null, "SSH keys")), status, body, section("Add a key", form));
  await draw();
}
