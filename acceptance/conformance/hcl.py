"""HCL shared by the conformance acceptance tests."""

from __future__ import annotations

import json
from pathlib import Path

from acceptance.conformance.everything import SCHEMA as EVERYTHING_SCHEMA
from provider.cty import decode_json


def header(store: Path) -> str:
    """`required_providers` and the default provider block, remote objects kept in `store`."""
    return f"""
terraform {{
  required_providers {{
    conformance = {{ source = "gpucloud/conformance" }}
  }}
}}

provider "conformance" {{
  store = {json.dumps(str(store))}
}}
"""


def everything(
    name: str, *, resource_name: str = "name", region: str = "eu-1", extra: str = "", deprecated: bool = True
) -> str:
    """A `conformance_everything` with every attribute and block set (no sensitive value); `deprecated`
    sets the deprecated attribute too (Terraform leaves deprecated attributes out of generated config)."""
    legacy = 'legacy_note = "kept for old modules"' if deprecated else ""
    return f"""
resource "conformance_everything" "{name}" {{
  name        = "{resource_name}"
  region      = "{region}"
  replicas    = 3
  ratio       = 0.25
  big         = 123456789012345678901234567890.5
  tags        = ["b", "a"]
  zones       = ["z2", "z1"]
  labels      = {{ team = "ml", env = "dev" }}
  settings    = {{ mode = "fast", level = 2 }}
  anything    = {{ nested = ["x", 1] }}
  {legacy}
  endpoint    = {{ host = "example.com" }}
  disks       = [{{ size = 10 }}, {{ size = 20 }}]
  rules       = [{{ port = 443 }}, {{ port = 22, protocol = "udp" }}, {{ port = 80 }}]
  env         = {{ A = {{ value = "1" }} }}
  {extra}
  network {{
    cidr = "10.0.0.0/24"
  }}
  network {{
    cidr = "10.0.1.0/24"
  }}
  placement {{
    zone   = "z1"
    weight = 2
  }}
  placement {{
    zone = "z2"
  }}
  options {{
    color = "blue"
  }}
}}
"""


def stored_objects(store: Path, kind: str = "everything") -> dict[str, dict[str, object]]:
    """The remote objects of `kind` as the provider stored them (decoded exactly)."""
    if not store.exists():
        return {}
    data = json.loads(store.read_text())
    return {key: decode_json(raw, EVERYTHING_SCHEMA.cty_type) for key, raw in data.get(kind, {}).items()}
