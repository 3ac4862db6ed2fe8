"""Properties of the plan algorithm over generated sets of objects."""

from hypothesis import given
from hypothesis import strategies as st

from provider.cty import is_unknown, values_equal
from provider.framework import (
    Int64Attribute,
    Schema,
    SetNestedAttribute,
    StringAttribute,
    use_state_for_unknown,
)
from provider.framework.plan import plan_resource

SCHEMA = Schema(
    attributes={
        "name": StringAttribute(required=True),
        "rules": SetNestedAttribute(
            optional=True,
            attributes={
                "port": Int64Attribute(required=True),
                "protocol": StringAttribute(optional=True, computed=True, default="tcp"),
                "rule_id": StringAttribute(computed=True, plan_modifiers=[use_state_for_unknown()]),
            },
        ),
    }
)

rules = st.dictionaries(st.integers(1, 65535), st.sampled_from([None, "tcp", "udp"]), max_size=6)


def stored(ports: dict[int, str | None]) -> list[dict]:
    return [{"port": p, "protocol": proto or "tcp", "rule_id": f"r-{p}"} for p, proto in ports.items()]


def configured(ports: dict[int, str | None], order: list[int]) -> list[dict]:
    return [{"port": p, "protocol": ports[p], "rule_id": None} for p in order]


@given(rules, st.randoms())
def test_plan_unchanged_set_in_any_order_is_empty(ports, rnd):
    order = list(ports)
    rnd.shuffle(order)
    prior = {"name": "a", "rules": stored(ports)}
    config = {"name": "a", "rules": configured(ports, order)}
    planned, replace = plan_resource(SCHEMA, config, prior, prior)
    assert values_equal(planned, prior, SCHEMA.cty_type)
    assert replace == []


@given(rules, rules)
def test_plan_added_elements_unknown_kept_elements_stable(old, added):
    new_ports = {**old, **{p: v for p, v in added.items() if p not in old}}
    prior = {"name": "a", "rules": stored(old)}
    config = {"name": "b", "rules": configured(new_ports, list(new_ports))}
    # Terraform's proposal: configured values, prior computed values for elements it could pair.
    proposed_rules = []
    for rule in config["rules"]:
        match = next(
            (
                r
                for r in prior["rules"]
                if r["port"] == rule["port"]
                and (rule["protocol"] is None or rule["protocol"] == r["protocol"])
            ),
            None,
        )
        proposed_rules.append(match if match else rule)
    proposed = {"name": "b", "rules": proposed_rules}
    first = plan_resource(SCHEMA, config, prior, proposed)
    assert first == plan_resource(SCHEMA, config, prior, proposed)  # deterministic
    for rule in first[0]["rules"]:
        kept = next(
            (r for r in prior["rules"] if r["port"] == rule["port"] and r["protocol"] == rule["protocol"]),
            None,
        )
        if kept is not None:
            assert rule["rule_id"] == kept["rule_id"]
        else:
            assert is_unknown(rule["rule_id"])
        assert rule["protocol"] in ("tcp", "udp")
