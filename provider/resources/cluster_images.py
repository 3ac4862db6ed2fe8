"""Container images of `gpucloud_gpu_cluster`: `container_images`, `registry_credentials` and the computed
`images` / `image_storage_bytes`, checked at plan time and mapped to and from the API's cluster object.

Each name becomes `/images/<name>` on every node (an OCI bundle Slurm runs with `srun --container`). The
plan-time checks follow the backend's reference grammar (`backend/provisioning/images.py`, Docker's):
a typo fails the plan on the map key instead of an import minutes into the apply.

An update whose image fails to import keeps the old bundle at `/images/<name>`; the state then records the
reference still in place for that name (or none, for a name that never imported), so the next plan proposes
the change again rather than claiming it was made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provider.client.image_refs import (
    FAILED_STATE,
    MAX_IMAGES,
    SETTLING_STATES,
    name_problem,
    reference_problem,
    registry_problem,
)
from provider.cty import STRING, AttributePath, format_path, is_unknown
from provider.framework import (
    Context,
    Int64Attribute,
    ListNestedAttribute,
    MapAttribute,
    StringAttribute,
    root,
    use_state_for_unknown_unless_changed,
)
from provider.framework.diagnostics import Diagnostics
from provider.framework.schema import Attribute, MapNestedAttribute

# -- plan-time checks ----------------------------------------------------------------------------------


def check_needs_slurm(ctx: Context, config: Mapping[str, Any], orchestrator: Any) -> None:
    """Images run through Slurm (`srun --container`): a cluster without it cannot have any (the API's rule,
    checked once the orchestrator is known, its default included)."""
    declared = config.get("container_images")
    if not isinstance(declared, dict) or not declared or is_unknown(orchestrator) or orchestrator == "slurm":
        return
    ctx.error(
        "Container Images Need Slurm",
        f"container_images run through Slurm (srun --container=/images/<name>), and this cluster's "
        f"orchestrator is \"{orchestrator}\". Set orchestrator = \"slurm\" (the default for more than one "
        "node; changing it replaces the cluster) or remove container_images.",
        root("container_images"),
    )


class _MapCheck:
    """Checks every known key (`on_keys`) or value of a map; each error is on the element's path."""

    def __init__(self, description: str, problem: Any, *, on_keys: bool, summary: str) -> None:
        self.description = description
        self._problem = problem
        self._on_keys = on_keys
        self._summary = summary

    def validate(self, value: Any, path: AttributePath, diags: Diagnostics) -> None:
        if not isinstance(value, dict):
            return
        for key, element in value.items():
            checked = key if self._on_keys else element
            if checked is None or is_unknown(checked):
                continue
            found = self._problem(checked)
            if found:
                at = path.element(key)
                diags.error(self._summary, f"{format_path(at)}: {found}.", at)


class _AtMost:
    """At most MAX_IMAGES entries (the API's limit on both maps)."""

    def __init__(self, what: str, summary: str, fix: str) -> None:
        self.description = f"at most {MAX_IMAGES} {what}"
        self._what, self._summary, self._fix = what, summary, fix

    def validate(self, value: Any, path: AttributePath, diags: Diagnostics) -> None:
        if isinstance(value, dict) and len(value) > MAX_IMAGES:
            diags.error(self._summary, f"{format_path(path)} has {len(value)} {self._what}; a cluster takes "
                        f"at most {MAX_IMAGES}. {self._fix}", path)


IMAGE_VALIDATORS = [
    _AtMost("images", "Too Many Container Images", "Drop the ones no job runs in."),
    _MapCheck("every key is an image name", name_problem, on_keys=True,
              summary="Invalid Container Image Name"),
    _MapCheck("every value is an OCI image reference", reference_problem, on_keys=False,
              summary="Invalid Container Image Reference"),
]
CREDENTIAL_VALIDATORS = [
    _AtMost("registries", "Too Many Registry Credentials", "Keep those the cluster's images come from."),
    _MapCheck("every key is a registry host[:port]", registry_problem, on_keys=True,
              summary="Invalid Registry Host"),
]


# -- schema --------------------------------------------------------------------------------------------

IMAGE_ATTRIBUTES: dict[str, Attribute] = {
    "name": StringAttribute(computed=True, description="The image's name: it is at `/images/<name>`."),
    "reference": StringAttribute(computed=True, description="The reference configured for the name."),
    "state": StringAttribute(
        computed=True,
        description="`pending` or `importing` (being pulled and unpacked), `ready`, or `failed` (see "
        "`reason`).",
    ),
    "digest": StringAttribute(
        computed=True,
        description="Manifest digest (`sha256:...`) of the bundle `/images/<name>` shows now: after a failed "
        "update still the old image's; null until a first import succeeds.",
    ),
    "size_bytes": Int64Attribute(
        computed=True, description="Size of that bundle on the cluster's shared storage; null until imported."
    ),
    "reason": StringAttribute(
        computed=True,
        description="Why the last import failed (not found, unauthorized, too large, foreign architecture, "
        "registry unreachable); null otherwise.",
    ),
}

CREDENTIAL_ATTRIBUTES: dict[str, Attribute] = {
    "username": StringAttribute(required=True, description="User name at the registry."),
    "password": StringAttribute(
        required=True,
        sensitive=True,
        description="Password or access token. Write-only at the API: the provider keeps the configured "
        "value in state, so a password changed outside Terraform is not detected.",
    ),
}


def image_attributes() -> dict[str, Attribute]:
    """The configurable image attributes of the resource (in-place changes, never a replacement)."""
    return {
        "container_images": MapAttribute(
            element_type=STRING,
            optional=True,
            description="Container images to import into the cluster: a map from a short name to an OCI "
            "reference (`nvcr.io/nvidia/pytorch:24.05-py3`, `ghcr.io/org/img@sha256:<64 hex>`, "
            "`ubuntu:22.04` from Docker Hub, `registry.internal:5000/team/train:v3`). Each image is pulled "
            "once per cluster, unpacked on its shared storage and appears read-only at `/images/<name>` on "
            "every node; jobs run in it with `srun --container=/images/<name> CMD`. Names: 1-63 lowercase "
            f"letters, digits, `_ . -`; at most {MAX_IMAGES}. Create waits until every image is imported (a "
            "failed image fails the create, naming it). Changes in place: a new reference is imported and "
            "switched atomically (running jobs keep the old bundle); if it fails, the old image stays, the "
            "apply fails naming the image and the reason, and the next plan proposes the change again.",
            validators=IMAGE_VALIDATORS,
        ),
        "registry_credentials": MapNestedAttribute(
            optional=True,
            attributes=CREDENTIAL_ATTRIBUTES,
            description="Logins for private registries, keyed by registry `host[:port]` as it appears in "
            "the references (e.g. `registry.internal:5000`). Stored sealed by the API and never returned: "
            "the state keeps the configured password, so a password changed outside Terraform cannot be "
            "detected (a changed user name or host is). Changes in place.",
            validators=CREDENTIAL_VALIDATORS,
        ),
    }


IMPORT_INPUTS = ("container_images", "container", "registry_credentials")


def computed_image_attributes() -> dict[str, Attribute]:
    """The computed image attributes: kept known in plans unless what imports images changes (the
    declared images, a single-node container, or credentials, which retry a failed import)."""
    keep = [use_state_for_unknown_unless_changed(*IMPORT_INPUTS)]
    return {
        "images": ListNestedAttribute(
            computed=True,
            attributes=IMAGE_ATTRIBUTES,
            description="The cluster's images, sorted by name, with their import state, digest and size.",
            plan_modifiers=keep,
        ),
        "image_storage_bytes": Int64Attribute(
            computed=True,
            description="Shared storage the images' bundles use (counts against the cluster's storage).",
            plan_modifiers=keep,
        ),
    }


# -- API <-> state -------------------------------------------------------------------------------------


def credentials_spec(value: Mapping[str, Any] | None) -> dict[str, dict[str, str]]:
    """`registry_credentials` as the API takes it (the whole map; empty clears it)."""
    return {host: {"username": c["username"], "password": c["password"]} for host, c in (value or {}).items()}


def _image_state(image: Mapping[str, Any]) -> dict[str, Any]:
    size = image.get("size_bytes")
    return {
        "name": image.get("name"),
        "reference": image.get("reference"),
        "state": image.get("state"),
        "digest": image.get("digest"),
        "size_bytes": None if size is None else int(size),
        "reason": image.get("reason"),
    }


def _credentials_state(body: Mapping[str, Any], prior: Mapping[str, Any]) -> dict[str, Any] | None:
    """The API's users per registry, with the password kept from `prior` (the API never returns it)."""
    read = body.get("registry_credentials") or {}
    before = prior.get("registry_credentials")
    if not read:
        return None if not before else {}
    known_before = before if isinstance(before, dict) else {}
    out: dict[str, Any] = {}
    for host, login in read.items():
        kept = known_before.get(host) if isinstance(known_before.get(host), dict) else {}
        out[host] = {"username": (login or {}).get("username"), "password": (kept or {}).get("password")}
    return out


def _images_in_place(body: Mapping[str, Any], prior: Mapping[str, Any]) -> dict[str, str] | None:
    """`container_images` as the nodes have it: a failed import keeps the reference `prior` had for that
    name (its bundle is still at /images/<name>), or leaves a name that never imported out."""
    wanted = dict(body.get("container_images") or {})
    before = prior.get("container_images")
    before = before if isinstance(before, dict) else {}
    for image in body.get("images") or []:
        name = image.get("name")
        if image.get("state") != FAILED_STATE or name not in wanted:
            continue
        if isinstance(before.get(name), str) and before[name] != wanted[name]:
            wanted[name] = before[name]
        elif before.get(name) != wanted[name]:
            del wanted[name]
    return None if not wanted and prior.get("container_images") is None else wanted


def images_state(body: Mapping[str, Any], prior: Mapping[str, Any]) -> dict[str, Any]:
    """The image attributes of the state from the API's cluster object and the prior state or plan."""
    images = sorted((_image_state(i) for i in body.get("images") or []), key=lambda i: str(i["name"]))
    storage = body.get("image_storage_bytes")
    return {
        "container_images": _images_in_place(body, prior),
        "registry_credentials": _credentials_state(body, prior),
        "images": images,
        "image_storage_bytes": int(storage) if storage is not None else 0,
    }


def images_settled(body: Mapping[str, Any]) -> bool:
    """No image is waiting to be or being imported."""
    return not any(i.get("state") in SETTLING_STATES for i in body.get("images") or [])


def failed_imports(body: Mapping[str, Any], changed: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, reason) of the images named in `changed` (name -> reference asked for) whose import failed."""
    out = []
    for image in body.get("images") or []:
        name = image.get("name")
        if image.get("state") == FAILED_STATE and name in changed:
            reason = str(image.get("reason") or "the import failed")
            out.append((str(name), reason.removeprefix(f'container_images["{name}"]: ')))
    return sorted(out)


def changed_images(plan: Mapping[str, Any], state: Mapping[str, Any]) -> dict[str, str]:
    """The names whose reference an update adds or changes (removals cannot fail)."""
    new = plan.get("container_images") or {}
    old = state.get("container_images") or {}
    return {name: ref for name, ref in new.items() if old.get(name) != ref}
