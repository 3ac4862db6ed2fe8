// Network & SSH: how to reach the cluster (login node, jumphost), each node's address and the ssh
// command through the jumphost, the fabric, and the SSH keys installed.

import { listAll } from "../api.js";
import { clear, copyButton, h, section, table } from "../dom.js";

function command(text) {
  return h("div", { class: "command" }, h("code", null, text), copyButton(text));
}

export async function render(panel, context) {
  const cluster = await context.reloadCluster();
  const keys = await listAll("/ssh-keys");
  const login = cluster.login;
  const jump = login && login.public_ip ? `${login.user}@${login.public_ip}` : null;
  const nodes = cluster.nodes || [];
  clear(panel,
    section("Connect",
      login
        ? h("div", null,
          h("p", null, "Log in to the cluster's login node:"), command(login.ssh_command),
          h("dl", { class: "facts-list" },
            h("dt", null, "Jumphost"), h("dd", null, login.host),
            h("dt", null, "Public IP"), h("dd", null, login.public_ip || "—"),
            h("dt", null, "User"), h("dd", null, login.user)))
        : h("p", { class: "muted" }, "No login node yet: the cluster is still coming up.")),
    section("Nodes", table([
      { label: "Node", value: (n) => n.name },
      { label: "Role", value: (n) => n.role },
      { label: "Private IP", value: (n) => h("code", null, n.private_ip || "—") },
      { label: "SSH", value: (n) => (jump && n.private_ip
        ? command(n.public_ip ? `ssh ${login.user}@${n.public_ip}` : `ssh -J ${jump} ${login.user}@${n.private_ip}`)
        : "—") },
    ], nodes, { caption: "Nodes", empty: "No nodes yet." })),
    cluster.fabric ? section("Fabric", h("dl", { class: "facts-list" },
      h("dt", null, "Fabric"), h("dd", null, `${cluster.fabric.name} (${cluster.fabric.kind})`),
      h("dt", null, "Subnet"), h("dd", null, cluster.fabric.subnet || "—"),
      h("dt", null, "Partition key"), h("dd", null, cluster.fabric.partition_key || "—"))) : null,
    section("SSH keys", table([
      { label: "Name", value: (k) => k.name },
      { label: "Type", value: (k) => k.key_type },
      { label: "Fingerprint", value: (k) => h("code", null, k.fingerprint) },
    ], keys.filter((k) => cluster.ssh_key_ids.includes(k.id)), { caption: "SSH keys", empty: "No SSH key on this cluster." })));
}
