// What a cluster's JSON names by id (its security groups, its reserved IP), read for the header's badges
// and the Network & SSH tab, and the badges themselves.

import { get, listAll } from "./api.js";
import { fmt, h } from "./dom.js";

// The groups the nodes enforce (the project's default group when the cluster names none) and the
// reserved address, or null when the cluster holds none (or it was just released).
export async function relatedOf(cluster) {
  const [groups, reservedIp] = await Promise.all([
    listAll("/security-groups"),
    cluster.reserved_ip_id ? get(`/reserved-ips/${cluster.reserved_ip_id}`).catch(() => null) : null,
  ]);
  const ids = cluster.security_group_ids || [];
  return {
    groups: ids.length ? groups.filter((g) => ids.includes(g.id)) : groups.filter((g) => g.is_default),
    reservedIp,
  };
}

// "in 3 h 20 min", "in 12 min", "overdue": how long until an ISO time.
export function until(iso, now = Date.now()) {
  const minutes = Math.round((Date.parse(iso) - now) / 60000);
  if (minutes <= 0) return "overdue";
  const days = Math.floor(minutes / 1440);
  const hours = Math.floor((minutes % 1440) / 60);
  const parts = [days ? `${days} d` : null, hours ? `${hours} h` : null, !days && minutes % 60 ? `${minutes % 60} min` : null];
  return `in ${parts.filter(Boolean).join(" ")}`;
}

function tag(kind, text, title) {
  return h("li", { class: `tag tag-${kind}`, dataset: { badge: kind }, title }, text);
}

const CAPACITY = { spot: "spot", spot_with_fallback: "spot + on-demand fallback" };

// The header's badges: the host pool whose servers are the nodes, capacity type (when not on-demand),
// expiry, scaling range, security groups, reserved IP, deletion protection. Nothing for what the cluster
// does not have.
export function clusterTags(cluster, related) {
  const tags = [];
  if (cluster.host_pool_id) {
    tags.push(tag("host-pool", h("a", { href: `#/host-pools/${encodeURIComponent(cluster.host_pool_id)}` }, `Host pool: ${cluster.host_pool_id}`),
      "The nodes are the project's own servers of this host pool (no compute charge)"));
  }
  if (CAPACITY[cluster.capacity_type]) tags.push(tag("capacity", CAPACITY[cluster.capacity_type], "Capacity type"));
  if (cluster.expires_at) {
    const ttl = cluster.ttl ? `TTL ${cluster.ttl}, ` : "";
    tags.push(tag("expiry", `${ttl}expires ${until(cluster.expires_at)}`, `Deleted at ${fmt.time(cluster.expires_at)}`));
  }
  if (cluster.autoscaling) {
    tags.push(tag("autoscaling", `autoscaling ${cluster.autoscaling.min_nodes}–${cluster.autoscaling.max_nodes} nodes`, "Scaling range"));
  }
  for (const group of related ? related.groups : []) {
    tags.push(tag("security-group", `SG ${group.name}${group.is_default ? " (default)" : ""}`, "Security group"));
  }
  if (related && related.reservedIp) tags.push(tag("reserved-ip", `IP ${related.reservedIp.address}`, "Reserved IP of the login node"));
  if (cluster.deletion_protection) tags.push(tag("protected", "deletion protection", "DELETE is refused until it is turned off"));
  return tags.length ? h("ul", { class: "tags", "aria-label": "Cluster properties" }, tags) : null;
}
