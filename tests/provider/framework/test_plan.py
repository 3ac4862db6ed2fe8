from provider.cty import NUMBER, UNKNOWN, AttributePath, GetAttr, is_unknown
from provider.framework import (
    Int64Attribute,
    ListNestedAttribute,
    ListNestedBlock,
    Schema,
    SetAttribute,
    SetNestedAttribute,
    SingleNestedAttribute,
    StringAttribute,
    requires_replace,
    requires_replace_if,
    use_state_for_unknown,
    use_state_for_unknown_unless_changed,
)
from provider.framework.plan import plan_resource

SCHEMA = Schema(
    attributes={
        "id": StringAttribute(computed=True, plan_modifiers=[use_state_for_unknown()]),
        "name": StringAttribute(required=True),
        "region": StringAttribute(required=True, plan_modifiers=[requires_replace()]),
        "size": Int64Attribute(optional=True, computed=True, default=1),
        "status": StringAttribute(computed=True),
        "nodes": ListNestedAttribute(
            computed=True,
            attributes={"name": StringAttribute(computed=True), "ip": StringAttribute(computed=True)},
        ),
    },
    blocks={
        "disk": ListNestedBlock(
            attributes={
                "size": Int64Attribute(required=True),
                "disk_id": StringAttribute(computed=True, plan_modifiers=[use_state_for_unknown()]),
                "serial": StringAttribute(computed=True),
            }
        )
    },
)


def config(**values):
    base = {"id": None, "name": "a", "region": "eu", "size": None, "status": None, "nodes": None, "disk": []}
    return {**base, **values}


def stored(**values):
    base = {
        "id": "c-1",
        "name": "a",
        "region": "eu",
        "size": 1,
        "status": "RUNNING",
        "nodes": [{"name": "n0", "ip": "10.0.0.1"}],
        "disk": [],
    }
    return {**base, **values}


def proposed_from(cfg, prior):
    """What Terraform proposes: config, with prior values where the config leaves computed attributes null."""
    out = dict(cfg)
    for key in ("id", "size", "status", "nodes"):
        if cfg[key] is None and prior is not None:
            out[key] = prior[key]
    return out


def test_plan_create_marks_computed_unknown_and_applies_defaults():
    cfg = config()
    planned, replace = plan_resource(SCHEMA, cfg, None, proposed_from(cfg, None))
    assert is_unknown(planned["id"]) and is_unknown(planned["status"]) and is_unknown(planned["nodes"])
    assert planned["size"] == 1
    assert planned["name"] == "a"
    assert replace == []


def test_plan_unchanged_update_keeps_prior_values():
    prior = stored()
    planned, replace = plan_resource(SCHEMA, config(), prior, proposed_from(config(), prior))
    assert planned == prior
    assert replace == []


def test_plan_update_marks_computed_unknown_except_use_state_for_unknown():
    prior = stored()
    cfg = config(name="b")
    planned, replace = plan_resource(SCHEMA, cfg, prior, proposed_from(cfg, prior))
    assert planned["id"] == "c-1"
    assert is_unknown(planned["status"])
    assert is_unknown(planned["nodes"])
    assert planned["name"] == "b"
    assert replace == []


def test_plan_requires_replace_only_when_value_changed():
    prior = stored()
    cfg = config(region="us", name="b")
    planned, replace = plan_resource(SCHEMA, cfg, prior, proposed_from(cfg, prior))
    assert replace == [AttributePath((GetAttr("region"),))]
    assert planned["region"] == "us"


def test_plan_default_reasserted_when_config_removes_value():
    prior = stored(size=4)
    planned, _ = plan_resource(SCHEMA, config(), prior, proposed_from(config(), prior))
    assert planned["size"] == 1
    assert is_unknown(planned["status"])


def test_plan_destroy_is_null():
    assert plan_resource(SCHEMA, None, stored(), None) == (None, [])


def test_plan_is_deterministic():
    cfg = config(disk=[{"size": 10, "disk_id": None, "serial": None}])
    first = plan_resource(SCHEMA, cfg, None, proposed_from(cfg, None))
    second = plan_resource(SCHEMA, cfg, None, proposed_from(cfg, None))
    assert first == second


def test_plan_block_elements_computed_attributes():
    cfg = config(disk=[{"size": 10, "disk_id": None, "serial": None}])
    planned, _ = plan_resource(SCHEMA, cfg, None, proposed_from(cfg, None))
    assert planned["disk"][0]["size"] == 10
    assert is_unknown(planned["disk"][0]["disk_id"]) and is_unknown(planned["disk"][0]["serial"])

    prior = stored(disk=[{"size": 10, "disk_id": "d-1", "serial": "s-1"}])
    cfg = config(name="b", disk=[{"size": 20, "disk_id": None, "serial": None}])
    proposed = proposed_from(cfg, prior)
    proposed["disk"] = [{"size": 20, "disk_id": "d-1", "serial": "s-1"}]
    planned, _ = plan_resource(SCHEMA, cfg, prior, proposed)
    assert planned["disk"][0]["disk_id"] == "d-1"
    assert is_unknown(planned["disk"][0]["serial"])


def test_plan_requires_replace_if_condition():
    shrink = requires_replace_if(
        lambda m: m.plan_value is not None and m.state_value is not None and m.plan_value < m.state_value,
        "Shrinking re-creates the resource.",
    )
    schema = Schema(attributes={"size": Int64Attribute(required=True, plan_modifiers=[shrink])})
    _, grow = plan_resource(schema, {"size": 5}, {"size": 3}, {"size": 5})
    _, shrunk = plan_resource(schema, {"size": 2}, {"size": 3}, {"size": 2})
    assert grow == []
    assert shrunk == [AttributePath((GetAttr("size"),))]


SET_SCHEMA = Schema(
    attributes={
        "name": StringAttribute(required=True),
        "rules": SetNestedAttribute(
            optional=True,
            attributes={
                "port": Int64Attribute(required=True),
                "rule_id": StringAttribute(computed=True, plan_modifiers=[use_state_for_unknown()]),
            },
        ),
    }
)


def test_plan_set_nested_elements_pair_with_prior_by_configured_values():
    prior = {"name": "a", "rules": [{"port": 22, "rule_id": "r-22"}, {"port": 443, "rule_id": "r-443"}]}
    cfg = {"name": "b", "rules": [{"port": 443, "rule_id": None}, {"port": 80, "rule_id": None}]}
    proposed = {"name": "b", "rules": [{"port": 443, "rule_id": "r-443"}, {"port": 80, "rule_id": None}]}
    planned, _ = plan_resource(SET_SCHEMA, cfg, prior, proposed)
    by_port = {r["port"]: r["rule_id"] for r in planned["rules"]}
    assert by_port[443] == "r-443"
    assert is_unknown(by_port[80])


def test_plan_set_nested_unchanged_is_empty():
    prior = {"name": "a", "rules": [{"port": 443, "rule_id": "r-443"}, {"port": 22, "rule_id": "r-22"}]}
    cfg = {"name": "a", "rules": [{"port": 22, "rule_id": None}, {"port": 443, "rule_id": None}]}
    planned, _ = plan_resource(SET_SCHEMA, cfg, prior, prior)
    assert planned == prior


def test_plan_unknown_config_value_stays_unknown():
    cfg = config(name=UNKNOWN)
    planned, _ = plan_resource(SCHEMA, cfg, stored(), proposed_from(cfg, stored()))
    assert is_unknown(planned["name"])
    assert planned["id"] == "c-1"


DERIVED_SCHEMA = Schema(
    attributes={
        "name": StringAttribute(required=True),
        "size": Int64Attribute(optional=True),
        "ports": SetAttribute(element_type=NUMBER, optional=True),
        "login": SingleNestedAttribute(
            computed=True,
            attributes={"host": StringAttribute(computed=True), "port": Int64Attribute(computed=True)},
            plan_modifiers=[use_state_for_unknown_unless_changed("size", "ports")],
        ),
        "status": StringAttribute(computed=True),
    }
)
DERIVED_PRIOR = {"name": "a", "size": 2, "ports": [22, 80], "login": {"host": "h", "port": 22},
                 "status": "RUNNING"}


def _derived_plan(**changes):
    cfg = {**DERIVED_PRIOR, "login": None, "status": None, **changes}
    proposed = {**DERIVED_PRIOR, **changes}
    return plan_resource(DERIVED_SCHEMA, cfg, DERIVED_PRIOR, proposed)[0]


def test_plan_use_state_unless_changed_keeps_nested_object_when_other_attributes_change():
    planned = _derived_plan(name="b", ports=[80, 22])  # a set in another order is no change
    assert planned["login"] == {"host": "h", "port": 22}  # nested attributes not re-marked unknown
    assert is_unknown(planned["status"])


def test_plan_use_state_unless_changed_plans_unknown_when_a_named_attribute_changes():
    assert is_unknown(_derived_plan(size=3)["login"])
    assert is_unknown(_derived_plan(ports=[22])["login"])
    created = plan_resource(DERIVED_SCHEMA, {**DERIVED_PRIOR, "login": None, "status": None}, None,
                            {**DERIVED_PRIOR, "login": None, "status": None})[0]
    assert is_unknown(created["login"])
