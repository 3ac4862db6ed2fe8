"""Container images of a cluster from the CLI: `cluster create --image NAME=REF --registry-login HOST=USER`,
`cluster images CLUSTER` (state, digest, size) and `cluster image set|remove CLUSTER ...`, which wait for the
import and fail naming the image and the reason.

Registry passwords never come from argv (where `ps` and shell history show them): from the environment,
`GPUCLOUD_REGISTRY_PASSWORD_<HOST>` (the host[:port] upper-cased, other characters as `_`), else
`GPUCLOUD_REGISTRY_PASSWORD`, else a hidden prompt on a terminal.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import click

from provider.cli.app import App, complete_cluster, find_cluster, json_option, pass_app
from provider.cli.output import emit, note, print_table
from provider.cli.wait import watch_cluster
from provider.client.image_refs import (
    FAILED_STATE,
    MAX_IMAGES,
    SETTLING_STATES,
    name_problem,
    reference_problem,
    registry_problem,
)

PASSWORD_ENV = "GPUCLOUD_REGISTRY_PASSWORD"
# `--image container=base|pytorch` used to mean `--container`: said so rather than importing Docker Hub's
# "pytorch" under the name "container".
OLD_CONTAINER_ALIASES = ("base", "pytorch")


def short_digest(digest: str | None) -> str | None:
    """`sha256:0123456789ab` (12 hex digits, as docker shows image ids)."""
    return digest[:19] if digest else None


def human_size(size: int | None) -> str | None:
    if size is None:
        return None
    value, unit = float(size), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"


IMAGE_COLUMNS = [
    ("NAME", lambda i: i["name"]),
    ("STATE", lambda i: str(i.get("state") or "").upper()),
    ("REFERENCE", lambda i: i.get("reference")),
    ("DIGEST", lambda i: short_digest(i.get("digest"))),
    ("SIZE", lambda i: human_size(i.get("size_bytes"))),
    ("REASON", lambda i: i.get("reason")),
]


def parse_images(pairs: Sequence[str], option: str = "--image") -> dict[str, str]:
    """NAME=REF pairs, checked as the API checks them (the error names the pair and the fix)."""
    images: dict[str, str] = {}
    for pair in pairs:
        name, sep, reference = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"{pair!r} is not NAME=REF, e.g. train=nvcr.io/nvidia/pytorch:24.05-py3",
                                     param_hint=option)
        if name == "container" and reference in OLD_CONTAINER_ALIASES:
            raise click.BadParameter(f"{pair!r}: the single-node container is --container {reference}; "
                                     f"{option} NAME=REF imports an OCI image", param_hint=option)
        problem = name_problem(name) or reference_problem(reference)
        if problem:
            raise click.BadParameter(f"{pair!r}: {problem}", param_hint=option)
        if name in images and images[name] != reference:
            raise click.BadParameter(f"{name!r} is given twice ({images[name]}, {reference})",
                                     param_hint=option)
        images[name] = reference
    if len(images) > MAX_IMAGES:
        raise click.BadParameter(f"{len(images)} images; a cluster takes at most {MAX_IMAGES}",
                                 param_hint=option)
    return images


def password_variable(host: str) -> str:
    """The environment variable holding one registry's password: GPUCLOUD_REGISTRY_PASSWORD_<HOST>."""
    return f"{PASSWORD_ENV}_{re.sub(r'[^A-Za-z0-9]', '_', host).upper()}"


def registry_password(host: str) -> str:
    """The password for `host`: its own variable, the shared one, or a hidden prompt on a terminal."""
    for variable in (password_variable(host), PASSWORD_ENV):
        value = os.environ.get(variable)
        if value:
            return value
    if not sys.stdin.isatty():
        raise click.UsageError(f"no password for the registry {host}: set {password_variable(host)} (or "
                               f"{PASSWORD_ENV}); passwords are never taken from the command line")
    return str(click.prompt(f"Password for {host}", hide_input=True, err=True))


def parse_logins(pairs: Sequence[str]) -> dict[str, dict[str, str]]:
    """`--registry-login HOST=USER` pairs as the API's `registry_credentials`, passwords from
    `registry_password`."""
    logins: dict[str, dict[str, str]] = {}
    for pair in pairs:
        host, sep, user = pair.partition("=")
        if not sep or not user:
            raise click.BadParameter(f"{pair!r} is not HOST=USER, e.g. registry.internal:5000=ci",
                                     param_hint="--registry-login")
        problem = registry_problem(host)
        if problem:
            raise click.BadParameter(f"{pair!r}: {problem}", param_hint="--registry-login")
        logins[host] = {"username": user, "password": registry_password(host)}
    return logins


def image_lines(c: Mapping[str, Any]) -> list[str]:
    """The cluster's images for `cluster info`: one line each."""
    lines = []
    for image in c.get("images") or []:
        bundle = (short_digest(image.get("digest")), human_size(image.get("size_bytes")))
        shown = ", ".join(f for f in bundle if f)
        if image.get("state") == FAILED_STATE:  # the name still shows the previous image, if any
            kept = f"still {shown}" if shown else "nothing imported"
            lines.append(f"/images/{image['name']}: {image.get('reference')} failed ({kept}): "
                         f"{image.get('reason') or 'no reason given'}")
            continue
        facts = ", ".join(f for f in (image.get("state"), shown) if f)
        lines.append(f"/images/{image['name']} = {image.get('reference')} ({facts})")
    return lines


def show_images(found: list[dict[str, Any]]) -> None:
    print_table(IMAGE_COLUMNS, found, empty="No container images.")


def images_settled(c: Mapping[str, Any]) -> bool:
    return not any(i.get("state") in SETTLING_STATES for i in c.get("images") or [])


def imported(wanted: Mapping[str, str]) -> Callable[[dict[str, Any]], bool]:
    """Done once the cluster is RUNNING and Ready, every node running, and each of `wanted` (name ->
    reference) shown with that reference and no image pending or importing."""

    def done(c: dict[str, Any]) -> bool:
        nodes = [n for n in c.get("nodes") or [] if n.get("status") == "RUNNING"]
        shown = {i.get("name"): i.get("reference") for i in c.get("images") or []}
        as_wanted = all(shown.get(name) == reference for name, reference in wanted.items())
        return bool(c["status"] == "RUNNING" and len(nodes) == c["node_count"] and images_settled(c)
                    and c.get("phase") in (None, "Ready") and as_wanted)

    return done


def failures(c: Mapping[str, Any], names: Mapping[str, str]) -> list[str]:
    """`name (reference): reason` for each of `names` whose import failed."""
    return [f"{i['name']} ({i.get('reference')}): {i.get('reason') or 'the import failed'}"
            for i in c.get("images") or [] if i.get("name") in names and i.get("state") == FAILED_STATE]


@click.command("images")
@click.argument("cluster_ref", metavar="CLUSTER", shell_complete=complete_cluster)
@json_option
@pass_app
def list_images(app: App, cluster_ref: str, as_json: bool) -> None:
    """List CLUSTER's container images: state, digest and size of what /images/<name> holds, and why an
    import failed. Jobs run in one with `srun --container=/images/<name> CMD`.

    \b
    Example:
      gpucloud cluster images train
    """
    c = find_cluster(app.client, cluster_ref)

    def show(found: list[dict[str, Any]]) -> None:
        print_table(IMAGE_COLUMNS, found, empty=f"{c['name']} has no container images: gpucloud cluster "
                    "image set --help")
        if found:
            note(f"Image storage: {human_size(int(c.get('image_storage_bytes') or 0))}")

    emit(list(c.get("images") or []), as_json, show)


@click.group("image")
def image() -> None:
    """Add, change or remove a cluster's container images (in place: running jobs keep the old image)."""


def _apply(app: App, c: dict[str, Any], changes: dict[str, Any], changed: Mapping[str, str], as_json: bool,
           no_wait: bool) -> None:
    updated = app.client.update_cluster(c["id"], changes)
    if not no_wait:
        what = f"the images of cluster {c['id']} to be imported"
        updated = watch_cluster(app.client, c["id"], imported(changed), what=what) or updated
    failed = failures(updated, changed)
    emit(list(updated.get("images") or []), as_json, show_images)
    if failed:
        kept = "; ".join(failed)
        raise click.ClickException(f"import failed, the previous image (if any) stays in place: {kept}")


@image.command("set")
@click.argument("cluster_ref", metavar="CLUSTER", shell_complete=complete_cluster)
@click.argument("pairs", metavar="NAME=REF...", nargs=-1, required=True)
@click.option("--registry-login", "logins", multiple=True, metavar="HOST=USER",
              help="Log in to a private registry (repeatable); the password comes from "
              f"{PASSWORD_ENV}_<HOST> or {PASSWORD_ENV}, else a hidden prompt. Replaces the cluster's "
              "logins, so give every registry it needs.")
@click.option("--no-wait", is_flag=True, help="Return once the API accepted the change.")
@json_option
@pass_app
def set_images(app: App, cluster_ref: str, pairs: tuple[str, ...], logins: tuple[str, ...], no_wait: bool,
               as_json: bool) -> None:
    """Add or change images of CLUSTER and wait until they are imported. A new reference is imported,
    then /images/<name> switches to it at once; jobs already running keep the old image. If an import
    fails the old image stays and the command fails naming it.

    \b
    Example:
      gpucloud cluster image set train torch=nvcr.io/nvidia/pytorch:24.05-py3
      GPUCLOUD_REGISTRY_PASSWORD=... gpucloud cluster image set train \\
          app=registry.internal:5000/team/train:v4 --registry-login registry.internal:5000=ci
    """
    wanted = parse_images(pairs, "NAME=REF")
    c = find_cluster(app.client, cluster_ref)
    current = dict(c.get("container_images") or {})
    changes: dict[str, Any] = {"container_images": {**current, **wanted}}
    if logins:
        changes["registry_credentials"] = _all_logins(c, parse_logins(logins))
    changed = {name: ref for name, ref in wanted.items() if current.get(name) != ref or _failed(c, name)}
    if not changed and not logins:
        note(f"{c['name']} already has {', '.join(f'{k}={v}' for k, v in wanted.items())}: nothing to do.")
        emit(list(c.get("images") or []), as_json, show_images)
        return
    note(f"Importing {', '.join(changed) or 'nothing new'} into {c['name']} ({c['id']})")
    _apply(app, c, changes, changed, as_json, no_wait)


def _failed(c: Mapping[str, Any], name: str) -> bool:
    return any(i.get("name") == name and i.get("state") == FAILED_STATE for i in c.get("images") or [])


def _all_logins(c: Mapping[str, Any], given: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """The API replaces the whole login map and never returns passwords: a registry the cluster has a
    login for must be given again, or it would be dropped without a word."""
    dropped = sorted(set(c.get("registry_credentials") or {}) - set(given))
    if dropped:
        raise click.UsageError(f"{c['name']} also logs in to {', '.join(dropped)}: the logins are replaced "
                               "as a whole and passwords cannot be read back, so give --registry-login for "
                               "each of them too")
    return given


@image.command("remove")
@click.argument("cluster_ref", metavar="CLUSTER", shell_complete=complete_cluster)
@click.argument("names", metavar="NAME...", nargs=-1, required=True)
@json_option
@pass_app
def remove_images(app: App, cluster_ref: str, names: tuple[str, ...], as_json: bool) -> None:
    """Remove images from CLUSTER: /images/<name> goes at once; running jobs keep their bundle until
    they end, then its storage is freed.

    \b
    Example:
      gpucloud cluster image remove train torch
    """
    c = find_cluster(app.client, cluster_ref)
    current = dict(c.get("container_images") or {})
    unknown = [n for n in names if n not in current]
    if unknown:
        have = ", ".join(sorted(current)) or "none"
        raise click.BadParameter(f"{', '.join(unknown)}: {c['name']} has no such image (it has: {have})",
                                 param_hint="NAME")
    kept = {k: v for k, v in current.items() if k not in names}
    updated = app.client.update_cluster(c["id"], {"container_images": kept})
    note(f"Removed {', '.join(names)} from {c['name']} ({c['id']}).")
    emit(list(updated.get("images") or []), as_json, show_images)
