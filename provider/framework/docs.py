"""Markdown docs from schemas, in the Terraform Registry layout (as tfplugindocs writes them).

    python -m provider.framework.docs --provider provider.resources.provider:GpuCloudProvider --out docs/
    python -m provider.framework.docs ... --check     # exit 1 when the files on disk are stale (CI)

Writes `index.md`, `resources/<name>.md`, `data-sources/<name>.md`, `ephemeral-resources/<name>.md`,
`list-resources/<name>.md`, `actions/<name>.md` and `functions/<name>.md` (<name> without the provider
prefix), with examples
taken from `<examples>/provider/provider.tf`, `<examples>/resources/<type>/resource.tf` (+ `import.sh`,
`import-by-identity.tf`), `<examples>/data-sources/<type>/data-source.tf`,
`<examples>/ephemeral-resources/<type>/ephemeral-resource.tf` and
`<examples>/list-resources/<type>/query.tfquery.hcl` and `<examples>/actions/<type>/action.tf` when they
exist.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Mapping
from pathlib import Path

from provider.framework.identity import IdentitySchema
from provider.framework.resource import Function, Provider
from provider.framework.schema import Attribute, Block, NestedAttribute, Schema
from provider.framework.schema import _label as type_label

Node = Schema | Block | NestedAttribute


def _flags(item: Attribute | Block) -> str:
    flags = [item.type_label]
    if isinstance(item, Block) and item.nesting != "single":
        if item.min_items:
            flags.append(f"Min: {item.min_items}")
        if item.max_items:
            flags.append(f"Max: {item.max_items}")
    if getattr(item, "sensitive", False):
        flags.append("Sensitive")
    if getattr(item, "write_only", False):
        flags.append("Write-only, Terraform 1.11+")
    if item.deprecation_message:
        flags.append("Deprecated")
    return ", ".join(flags)


def _line(name: str, item: Attribute | Block, anchor: str | None) -> str:
    text = item.description.strip()
    if isinstance(item, Attribute) and item.has_default and "Default" not in text:
        default = item.default
        shown = str(default).lower() if isinstance(default, bool) else repr(default).replace("'", '"')
        text = f"{text} Defaults to `{shown}`.".strip()
    if item.deprecation_message:
        text = f"{text} **Deprecated** {item.deprecation_message}".strip()
    if anchor:
        text = f"{text} (see [below for nested schema](#{anchor}))".strip()
    return f"- `{name}` ({_flags(item)}) {text}".rstrip()


def _groups(node: Node) -> dict[str, list[tuple[str, Attribute | Block]]]:
    groups: dict[str, list[tuple[str, Attribute | Block]]] = {"Required": [], "Optional": [], "Read-Only": []}
    for name, attr in sorted(node.attributes.items()):
        if attr.required:
            groups["Required"].append((name, attr))
        elif attr.optional:
            groups["Optional"].append((name, attr))
        else:
            groups["Read-Only"].append((name, attr))
    for name, block in sorted(node.blocks.items()):
        groups["Required" if block.min_items else "Optional"].append((name, block))
    return groups


def render_schema(node: Node, *, heading: str = "## Schema", prefix: str = "") -> str:
    """The Required / Optional / Read-Only lists of `node`, then one section per nested schema."""
    out = [heading, ""] if heading else []
    nested: list[tuple[str, str, Node]] = []
    for group, items in _groups(node).items():
        if not items:
            continue
        out += [f"### {group}" if heading else f"{group}:", ""]
        for name, item in items:
            anchor = None
            if isinstance(item, NestedAttribute | Block):
                path = f"{prefix}{name}"
                anchor = (
                    f"nestedatt--{path.replace('.', '--')}"
                    if isinstance(item, NestedAttribute)
                    else f"nestedblock--{path.replace('.', '--')}"
                )
                nested.append((anchor, path, item))
            out.append(_line(name, item, anchor))
        out.append("")
    for anchor, path, child in nested:
        out += [f'<a id="{anchor}"></a>', f"### Nested Schema for `{path}`", ""]
        out.append(render_schema(child, heading="", prefix=f"{path}."))
    return "\n".join(out).rstrip() + "\n"


def _front_matter(title: str, description: str) -> str:
    first = description.strip().splitlines()[0] if description.strip() else ""
    return f'---\npage_title: "{title}"\nsubcategory: ""\ndescription: |-\n  {first}\n---\n\n'


def _example(path: Path, lang: str, heading: str = "## Example Usage", intro: str = "") -> str:
    if not path.exists():
        return ""
    body = path.read_text().rstrip()
    return f"{heading}\n\n{intro}```{lang}\n{body}\n```\n\n"


def _page(kind: str, type_name: str, provider: str, schema: Schema, examples: Path, example_file: str) -> str:
    text = _front_matter(f"{type_name} {kind} - {provider}", schema.description)
    text += f"# {type_name} ({kind})\n\n"
    if schema.description:
        text += schema.description.strip() + "\n\n"
    if schema.deprecation_message:
        text += f"~> **Deprecated:** {schema.deprecation_message}\n\n"
    text += _example(examples / example_file, "terraform")
    text += render_schema(schema)
    return text


def _identity_section(identity: IdentitySchema | None, examples: Path) -> str:
    """The identity of a resource: how to import by it (Terraform 1.12+) and its attributes."""
    if identity is None:
        return ""
    text = _example(
        examples / "import-by-identity.tf",
        "terraform",
        "## Import by Identity",
        "In Terraform 1.12 and later, an `import` block can name the object by its identity:\n\n",
    )
    if not text:
        text = "## Import by Identity\n\n"
    text += "### Identity Schema\n\n"
    for title, required in (("Required", True), ("Optional", False)):
        lines = [
            f"- `{name}` ({type_label(attr.type)}) {attr.description}".rstrip()
            for name, attr in sorted(identity.attributes.items())
            if attr.required_for_import is required
        ]
        if lines:
            text += f"#### {title}\n\n" + "\n".join(lines) + "\n\n"
    return text


def _function_page(fn: Function, provider: str, examples: Path) -> str:
    text = _front_matter(f"{fn.name} function - {provider}", fn.summary)
    text += f"# function: {fn.name}\n\n{fn.description or fn.summary}\n\n"
    text += _example(examples / "functions" / fn.name / "function.tf", "terraform")
    params = ", ".join(f"{p.name} {type_label(p.type).lower()}" for p in fn.parameters)
    if fn.variadic is not None:
        params += f"{', ' if params else ''}{fn.variadic.name} {type_label(fn.variadic.type).lower()}..."
    text += f"## Signature\n\n```text\n{fn.name}({params}) {type_label(fn.return_type).lower()}\n```\n\n"
    lines = [f"1. `{p.name}` ({type_label(p.type)}) {p.description}".rstrip() for p in fn.parameters]
    if fn.variadic is not None:
        lines.append(
            f"1. `{fn.variadic.name}` (Variadic, {type_label(fn.variadic.type)}) "
            f"{fn.variadic.description}".rstrip()
        )
    if lines:
        text += "## Arguments\n\n" + "\n".join(lines) + "\n"
    return text


def generate(provider: Provider, examples: Path) -> dict[str, str]:
    """Relative path -> markdown for every page of `provider`."""
    name = provider.type_name
    pages: dict[str, str] = {}
    index = _front_matter(f"{name} Provider", provider.schema.description)
    index += f"# {name} Provider\n\n"
    if provider.schema.description:
        index += provider.schema.description.strip() + "\n\n"
    index += _example(examples / "provider" / "provider.tf", "terraform")
    index += render_schema(provider.schema)
    pages["index.md"] = index

    def short(type_name: str) -> str:
        return type_name.removeprefix(f"{name}_")

    for r in provider.resources():
        page = _page(
            "Resource", r.type_name, name, r.schema, examples / "resources" / r.type_name, "resource.tf"
        )
        page = page.rstrip() + "\n\n"  # the schema list ends without a blank line
        page += _example(
            examples / "resources" / r.type_name / "import.sh",
            "shell",
            "## Import",
            "Import is supported using the following syntax:\n\n",
        )
        page += _identity_section(r.identity_schema, examples / "resources" / r.type_name)
        pages[f"resources/{short(r.type_name)}.md"] = page.rstrip() + "\n"
    for d in provider.data_sources():
        pages[f"data-sources/{short(d.type_name)}.md"] = _page(
            "Data Source",
            d.type_name,
            name,
            d.schema,
            examples / "data-sources" / d.type_name,
            "data-source.tf",
        )
    for e in provider.ephemeral_resources():
        pages[f"ephemeral-resources/{short(e.type_name)}.md"] = _page(
            "Ephemeral Resource",
            e.type_name,
            name,
            e.schema,
            examples / "ephemeral-resources" / e.type_name,
            "ephemeral-resource.tf",
        )
    for lister in provider.list_resources():
        pages[f"list-resources/{short(lister.type_name)}.md"] = _page(
            "List Resource",
            lister.type_name,
            name,
            lister.schema,
            examples / "list-resources" / lister.type_name,
            "query.tfquery.hcl",
        )
    for action in provider.actions():
        pages[f"actions/{short(action.type_name)}.md"] = _page(
            "Action",
            action.type_name,
            name,
            action.schema,
            examples / "actions" / action.type_name,
            "action.tf",
        )
    for f in provider.functions():
        pages[f"functions/{f.name}.md"] = _function_page(f, name, examples)
    return pages


def write(pages: Mapping[str, str], out: Path) -> None:
    for rel, text in pages.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def stale(pages: Mapping[str, str], out: Path) -> list[str]:
    """Pages whose file is missing or differs."""
    return [
        rel
        for rel, text in sorted(pages.items())
        if not (out / rel).exists() or (out / rel).read_text() != text
    ]


def load_provider(spec: str) -> Provider:
    module_name, _, class_name = spec.partition(":")
    provider_class = getattr(importlib.import_module(module_name), class_name)
    provider: Provider = provider_class()
    return provider


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m provider.framework.docs", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--provider", required=True, help="module:Class of the provider")
    parser.add_argument("--out", type=Path, default=Path("docs"), help="output directory (default docs/)")
    parser.add_argument(
        "--examples",
        type=Path,
        default=Path("examples/terraform"),
        help="examples directory (default examples/terraform)",
    )
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when docs are stale")
    args = parser.parse_args(argv)
    pages = generate(load_provider(args.provider), args.examples)
    if args.check:
        outdated = stale(pages, args.out)
        for rel in outdated:
            print(f"stale: {args.out / rel}", file=sys.stderr)
        if outdated:
            print("docs are stale: run make generate", file=sys.stderr)
        return 1 if outdated else 0
    write(pages, args.out)
    print(f"wrote {len(pages)} pages to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
