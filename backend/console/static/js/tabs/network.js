// Network & SSH: how to reach the cluster (login node, jumphost), each node's address and the ssh
// command through the jumphost, the host keys' fingerprints (to check on first connect), the security
// groups and reserved IP, the fabric, and the SSH keys installed.

import { listAll } from "../api.js";
import { relatedOf } from "../cluster-related.js";
import { badge, clear, copyButton, fmt, h, section, table } from "../dom.js";
import { keyType, sshFingerprint } from "../fingerprint.js";
import { rulesList } from "../pages/security-groups.js";

function command(text) {
  return h("div", { class: "command" }, h("code", null, text), copyButton(text));
}

export async function render(panel, context) {
  const cluster = await context.reloadCluster();
  const [keys, related, hostKeys] = await Promise.all([
    listAll("/ssh-keys"), context.related() || relatedOf(cluster), hostKeyRows(cluster)]);
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
    hostKeys.length ? section("Host keys", h("p", { class: "muted small" },
      "Compare with what ssh prints on the first connection (ssh-keygen -lf prints the same form)."),
    table([
      { label: "Host", value: (r) => r.host },
      { label: "Type", value: (r) => r.type, nowrap: true },
      { label: "Fingerprint", value: (r) => h("code", { class: "fingerprint" }, r.fingerprint || "(needs HTTPS or localhost to compute)") },
    ], hostKeys, { caption: "Host keys" })) : null,
    groupsSection(related.groups),
    reservedIpSection(related.reservedIp, login),
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

// One row per host whose JSON carries a host key (an OpenSSH public-key line): the login node, then
// each node; none when the API gives none.
async function hostKeyRows(cluster) {
  const hosts = [
    ...(cluster.login && cluster.login.host_key ? [[`${cluster.login.host} (login)`, cluster.login.host_key]] : []),
    ...(cluster.nodes || []).filter((n) => n.host_key).map((n) => [n.name, n.host_key]),
  ];
  return Promise.all(hosts.map(async ([host, line]) => ({ host, type: keyType(line), fingerprint: await sshFingerprint(line) })));
}

function groupsSection(groups) {
  return h("section", { class: "panel", id: "network-security-groups" }, h("h2", null, "Security groups"),
    h("p", { class: "muted small" }, "Traffic between the cluster's own nodes is always allowed; these rules govern the rest."),
    table([
      { label: "Group", value: (g) => h("span", null, g.name, g.is_default ? [" ", badge("default")] : null) },
      { label: "Inbound", value: (g) => rulesList(g.ingress, "ingress") },
      { label: "Outbound", value: (g) => rulesList(g.egress, "egress") },
    ], groups, { caption: "Security groups", empty: "No security group applies (the project has no default group)." }));
}

function reservedIpSection(address, login) {
  return h("section", { class: "panel", id: "network-reserved-ip" }, h("h2", null, "Reserved IP"),
    address ? h("dl", { class: "facts-list" },
      h("dt", null, "Address"), h("dd", null, h("code", null, address.address)),
      h("dt", null, "Name"), h("dd", null, address.name || "—"),
      h("dt", null, "Status"), h("dd", null, address.status),
      h("dt", null, "Hourly cost"), h("dd", null, fmt.usd(address.hourly_cost_usd)))
      : h("p", { class: "muted" }, login && login.public_ip
        ? "None: the login node's public IP is released with the cluster. Reserve it to keep it (POST /v1/clusters/ID/reserve-ip)."
        : "None."));
}
