from provider.framework.docs import generate, main, render_schema
from tests.provider.framework.sample_provider import SampleProvider

SPEC = "tests.provider.framework.sample_provider:SampleProvider"


def test_docs_registry_layout_with_examples(tmp_path):
    examples = tmp_path / "examples"
    (examples / "resources" / "sample_thing").mkdir(parents=True)
    (examples / "resources" / "sample_thing" / "resource.tf").write_text('resource "sample_thing" "x" {}\n')
    (examples / "resources" / "sample_thing" / "import.sh").write_text(
        "terraform import sample_thing.x t-1\n"
    )
    pages = generate(SampleProvider(), examples)
    assert set(pages) == {
        "index.md",
        "resources/thing.md",
        "data-sources/echo.md",
        "ephemeral-resources/token.md",
        "list-resources/thing.md",
        "actions/poke.md",
        "functions/add.md",
    }
    page = pages["resources/thing.md"]
    assert page.startswith('---\npage_title: "sample_thing Resource - sample"')
    assert '## Example Usage\n\n```terraform\nresource "sample_thing" "x" {}\n```' in page
    assert (
        "## Import\n\nImport is supported using the following syntax:\n\n```shell\nterraform import" in page
    )
    assert page.index("### Required") < page.index("### Optional") < page.index("### Read-Only")
    assert '- `zone` (String) Defaults to `"a"`.' in page
    assert "- `token` (String, Sensitive)" in pages["ephemeral-resources/token.md"]
    action = pages["actions/poke.md"]
    assert action.startswith('---\npage_title: "sample_poke Action - sample"')
    assert "# sample_poke (Action)" in action
    assert "### Required\n\n- `thing_id` (String)" in action
    # Without an import-by-identity.tf example the identity attributes are still listed.
    assert page.endswith(
        "## Import by Identity\n\n### Identity Schema\n\n#### Required\n\n- `id` (String) The thing's id.\n"
    )


def test_docs_identity_import_example(tmp_path):
    folder = tmp_path / "resources" / "sample_thing"
    folder.mkdir(parents=True)
    example = 'import {\n  to = sample_thing.x\n  identity = { id = "t-1" }\n}\n'
    (folder / "import-by-identity.tf").write_text(example)
    page = generate(SampleProvider(), tmp_path)["resources/thing.md"]
    assert "In Terraform 1.12 and later, an `import` block can name the object by its identity" in page
    assert 'identity = { id = "t-1" }' in page
    assert page.index("## Import by Identity") < page.index("### Identity Schema")


def test_docs_nested_schemas_are_linked():
    from provider.framework import ListNestedBlock, Schema, SingleNestedAttribute, StringAttribute

    schema = Schema(
        attributes={
            "login": SingleNestedAttribute(
                computed=True, description="Login.", attributes={"host": StringAttribute(computed=True)}
            )
        },
        blocks={"disk": ListNestedBlock(max_items=2, attributes={"size": StringAttribute(required=True)})},
    )
    text = render_schema(schema)
    assert "- `login` (Attributes) Login. (see [below for nested schema](#nestedatt--login))" in text
    assert "- `disk` (Block List, Max: 2)" in text
    assert (
        '<a id="nestedatt--login"></a>\n### Nested Schema for `login`\n\nRead-Only:\n\n- `host` (String)'
        in text
    )


def test_docs_cli_writes_and_checks_staleness(tmp_path, capsys):
    out = tmp_path / "docs"
    assert main(["--provider", SPEC, "--out", str(out), "--examples", str(tmp_path / "none")]) == 0
    assert (out / "resources" / "thing.md").exists()
    assert main(["--provider", SPEC, "--out", str(out), "--examples", str(tmp_path / "none"), "--check"]) == 0
    (out / "index.md").write_text("edited by hand\n")
    assert main(["--provider", SPEC, "--out", str(out), "--examples", str(tmp_path / "none"), "--check"]) == 1
    assert "stale:" in capsys.readouterr().err
