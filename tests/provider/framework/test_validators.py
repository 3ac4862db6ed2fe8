from decimal import Decimal

from provider.cty import STRING, UNKNOWN, AttributePath, GetAttr, Index, format_path
from provider.framework import (
    Int64Attribute,
    ListAttribute,
    ListNestedBlock,
    Schema,
    SetAttribute,
    StringAttribute,
)
from provider.framework.diagnostics import Diagnostics
from provider.framework.validate import validate_config
from provider.framework.validators import (
    each_element,
    int_between,
    number_between,
    size_between,
    string_length,
    string_matches,
    string_one_of,
)

NAME = AttributePath((GetAttr("name"),))


def run(validator, value, path=NAME):
    diags = Diagnostics()
    validator.validate(value, path, diags)
    return diags


def test_validators_skip_null_and_unknown():
    for validator in (string_length(min=1, max=3), string_one_of("a"), int_between(1, 2), size_between(1, 2)):
        assert run(validator, None) == []
        assert run(validator, UNKNOWN) == []


def test_string_length_error_names_attribute_and_has_severity():
    (diag,) = run(string_length(min=1, max=3), "abcd")
    assert diag.severity == "error"
    assert diag.path == NAME
    assert "Attribute name string length must be between 1 and 3" in diag.detail
    assert "abcd" in diag.detail


def test_string_one_of_and_regex():
    assert run(string_one_of("slurm", "kubernetes"), "slurm") == []
    assert "must be one of" in run(string_one_of("slurm", "kubernetes"), "k8s")[0].detail
    assert run(string_matches(r"[a-z][a-z0-9-]*"), "gpu-1") == []
    (diag,) = run(string_matches(r"[a-z][a-z0-9-]*", "must be lowercase letters, digits and dashes"), "GPU")
    assert "must be lowercase" in diag.detail


def test_int_and_number_ranges():
    assert run(int_between(1, 8), 8) == []
    assert "between 1 and 8" in run(int_between(1, 8), 9)[0].detail
    assert run(number_between(0.5, 2), Decimal("1.5")) == []
    assert run(number_between(0.5, 2), 3)


def test_size_and_each_element_paths():
    assert "at most 2 elements" in run(size_between(max=2), ["a", "b", "c"])[0].detail
    (diag,) = run(each_element(string_length(min=2)), ["ok", "x"])
    assert diag.path == AttributePath((GetAttr("name"), Index(1)))


def test_validate_config_walks_blocks_with_paths():
    schema = Schema(
        attributes={
            "count": Int64Attribute(optional=True),
            "tags": SetAttribute(element_type=STRING, optional=True, validators=[size_between(max=1)]),
            "old": ListAttribute(element_type=STRING, optional=True, deprecation_message="Use tags."),
        },
        blocks={
            "disk": ListNestedBlock(
                attributes={"name": StringAttribute(required=True, validators=[string_length(max=3)])}
            )
        },
    )
    diags = Diagnostics()
    config = {
        "count": Decimal("1.5"),
        "tags": ["a", "b"],
        "old": ["x"],
        "disk": [{"name": "ok"}, {"name": "long"}],
    }
    validate_config(schema, config, diags)
    found = {(d.severity, format_path(d.path)) for d in diags}
    assert found == {("error", "count"), ("error", "tags"), ("warning", "old"), ("error", "disk[1].name")}


def test_validate_config_ignores_unknown_values():
    schema = Schema(attributes={"name": StringAttribute(required=True, validators=[string_length(max=1)])})
    diags = Diagnostics()
    validate_config(schema, {"name": UNKNOWN}, diags)
    assert diags == []


def test_config_validators_combinations():
    from provider.framework.validators import at_least_one_of, conflicting, exactly_one_of, required_together

    def check(validator, config):
        diags = Diagnostics()
        validator.validate(config, diags)
        return diags

    assert check(exactly_one_of("id", "name"), {"id": "x", "name": None}) == []
    (both,) = check(exactly_one_of("id", "name"), {"id": "x", "name": "y"})
    assert both.path == AttributePath((GetAttr("name"),))
    assert (
        "Exactly one of these attributes must be set: id, name"
        in check(exactly_one_of("id", "name"), {"id": None, "name": None})[0].detail
    )
    assert check(exactly_one_of("id", "name"), {"id": UNKNOWN, "name": None}) == []
    assert check(conflicting("a", "b"), {"a": 1, "b": None}) == []
    assert check(conflicting("a", "b"), {"a": 1, "b": 2})
    assert check(at_least_one_of("a", "b"), {"a": None, "b": []})
    (missing,) = check(required_together("user", "password"), {"user": "u", "password": None})
    assert missing.path == AttributePath((GetAttr("password"),))


def test_config_validators_run_in_validate_rpc():
    from provider._proto import tfplugin6_pb2 as pb
    from provider.cty import encode_msgpack
    from provider.framework import DataSource
    from provider.framework.server import ProviderServer
    from provider.framework.validators import exactly_one_of
    from tests.provider.framework.sample_provider import SampleProvider

    class Lookup(DataSource):
        type_name = "sample_lookup"
        schema = Schema(
            attributes={"id": StringAttribute(optional=True), "name": StringAttribute(optional=True)}
        )
        config_validators = (exactly_one_of("id", "name"),)

    provider = SampleProvider()
    provider.data_sources = lambda: [Lookup()]
    server = ProviderServer(provider)
    config = pb.DynamicValue(msgpack=encode_msgpack({"id": None, "name": None}, Lookup.schema.cty_type))
    resp = server.validate_data_resource_config(
        pb.ValidateDataResourceConfig.Request(type_name="sample_lookup", config=config)
    )
    assert resp.diagnostics[0].summary == "Invalid Attribute Combination"


def test_validate_config_set_element_problems_point_at_the_set_and_name_the_element():
    schema = Schema(attributes={"keys": SetAttribute(element_type=STRING, optional=True,
                                                     validators=[each_element(string_length(min=3))])})
    diags = Diagnostics()
    validate_config(schema, {"keys": ["abc", "x"]}, diags)  # the second element is the bad one
    (diag,) = diags
    assert diag.path == AttributePath((GetAttr("keys"),))
    assert diag.detail.startswith('Attribute keys element "x" string length must be at least 3')


def test_validate_config_fractional_int64_names_the_attributes_range():
    schema = Schema(
        attributes={"node_count": Int64Attribute(optional=True, validators=[int_between(1, 4096)])}
    )
    diags = Diagnostics()
    validate_config(schema, {"node_count": Decimal("2.5")}, diags)
    (diag,) = diags
    assert diag.detail == "Attribute node_count must be a whole number between 1 and 4096, got: 2.5"
