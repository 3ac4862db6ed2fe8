"""The nftables ruleset of a node from its security group rules: what every rule becomes, and what no
rule decides (loopback, replies, the cluster but the host's addresses, the backend's SSH from the
management address)."""

from __future__ import annotations

from backend.provisioning.node_config.firewall import ruleset

RULES = {
    "ingress": [
        {"protocol": "tcp", "from_port": 22, "to_port": None, "cidr_blocks": ["203.0.113.0/24", "::/0"]},
        {"protocol": "udp", "from_port": 5000, "to_port": 5010, "cidr_blocks": ["10.0.0.0/8"]},
        {"protocol": "icmp", "from_port": None, "to_port": None, "cidr_blocks": ["0.0.0.0/0", "::/0"]},
    ],
    "egress": [{"protocol": "all", "from_port": None, "to_port": None, "cidr_blocks": ["0.0.0.0/0"]}],
}


def test_firewall_ruleset_renders_every_rule_and_the_always_allowed_traffic() -> None:
    script = ruleset(RULES, peers="172.20.0.0/22", outsider="172.20.0.1", management="172.20.0.2")
    lines = [line.strip() for line in script.splitlines()]
    # Replaced atomically: created if absent, deleted and defined again in one `nft -f` transaction.
    assert lines[:3] == ["table inet gpucloud", "delete table inet gpucloud", "table inet gpucloud {"]
    assert lines.count("type filter hook input priority filter; policy drop;") == 1
    assert lines.count("ct state established,related accept") == 2
    assert 'iif "lo" accept' in lines and 'oif "lo" accept' in lines
    # The cluster, not the host's two addresses on its bridge.
    assert "ip saddr 172.20.0.0/22 ip saddr != { 172.20.0.1, 172.20.0.2 } accept" in lines
    assert "ip daddr 172.20.0.0/22 ip daddr != { 172.20.0.1, 172.20.0.2 } accept" in lines
    # The management address: the backend's SSH in (and its replies), nothing a node opens to it.
    assert "ip saddr 172.20.0.2 tcp dport 22 accept" in lines
    assert not [line for line in lines if line.startswith("ip daddr 172.20.0.2")]
    assert "ip saddr 203.0.113.0/24 tcp dport 22-22 accept" in lines
    assert "ip6 saddr ::/0 tcp dport 22-22 accept" in lines
    assert "ip saddr 10.0.0.0/8 udp dport 5000-5010 accept" in lines
    assert "ip saddr 0.0.0.0/0 meta l4proto icmp accept" in lines
    assert "ip6 saddr ::/0 meta l4proto ipv6-icmp accept" in lines
    assert "ip daddr 0.0.0.0/0 accept" in lines
