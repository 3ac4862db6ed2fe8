"""OCI image references and image names as the API accepts them (Docker's grammar, the backend's
`backend/provisioning/images.py`): checked by the provider at plan time and by the CLI before a request,
each problem worded with its fix. Pure functions of strings: the CLI stands on the client alone.
"""

from __future__ import annotations

import ipaddress
import re

MAX_IMAGES = 16
IMAGE_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
SETTLING_STATES = ("pending", "importing")
FAILED_STATE = "failed"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*")
EXAMPLE_REFERENCE = "nvcr.io/nvidia/pytorch:24.05-py3"
MAX_REFERENCE_LENGTH = 512  # the API's limit


def name_problem(name: str) -> str | None:
    """Why `name` cannot be an image name (a path component under /images/), or None."""
    if IMAGE_NAME.fullmatch(name):
        return None
    return (f'"{name}" is not an image name: use 1-63 lowercase letters, digits, _ . - starting with a '
            "letter or digit (it becomes /images/<name> on the nodes)")


def _registry_problem(registry: str) -> str | None:
    host, port = registry, ""
    if registry.startswith("["):
        host, _, port = registry[1:].partition("]")
        port = port.removeprefix(":")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"[{host}] is not an IPv6 address: write the registry as [address]:port"
    elif ":" in registry:
        host, port = registry.rsplit(":", 1)
    if not registry.startswith("[") and not _HOST.fullmatch(host):
        return f'"{host}" is not a registry host name: write host[:port]/repository:tag'
    if port and not (port.isdigit() and 1 <= int(port) <= 65535):
        return f'"{port}" is not a port (1-65535): write host:port/repository:tag'
    return None


def _repository_problem(reference: str, repository: str) -> str | None:
    for component in repository.split("/"):
        if _PATH_COMPONENT.fullmatch(component):
            continue
        if _PATH_COMPONENT.fullmatch(component.lower()):
            fixed = reference.replace(component, component.lower())
            return f'repository names are lowercase: write "{fixed}"'
        return f'"{component}" is not a repository path component: use lowercase letters, digits and . _ -'
    return None


def reference_problem(reference: str) -> str | None:
    """Why `reference` is not an OCI image reference the API accepts, with the fix; None when it is."""
    text = reference.strip()
    if not text:
        return f"the reference is empty: write registry/repository:tag, e.g. {EXAMPLE_REFERENCE}"
    if len(reference) > MAX_REFERENCE_LENGTH:
        return f"the reference is {len(reference)} characters long, over the {MAX_REFERENCE_LENGTH} allowed"
    if "://" in text:
        return f'a reference has no scheme: drop "{text.split("://")[0]}://"'
    rest, _, digest = text.partition("@")
    if digest and not _DIGEST.fullmatch(digest):
        return (f'"{digest}" is not a digest: pin with @sha256: and the 64 lowercase hex digits of the '
                "manifest")
    last = rest.rsplit("/", 1)[-1]
    if ":" in last and not last.startswith("["):
        rest, tag = rest.rsplit(":", 1)
        if not _TAG.fullmatch(tag):
            return (f'"{tag}" is not a tag: tags are letters, digits, _ . - (up to 128, not starting with '
                    ". or -)")
    if not rest:
        return "the repository is missing: write repository:tag"
    first, _, remainder = rest.partition("/")
    repository = rest
    if remainder and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        problem = _registry_problem(first)
        if problem:
            return problem
        repository = remainder
    return _repository_problem(reference, repository)


def registry_problem(registry: str) -> str | None:
    """Why a `registry_credentials` key is not a registry host[:port] (no scheme, no path), or None."""
    if "/" in registry:
        return f'"{registry}" is not a registry host: write host[:port] only, e.g. registry.internal:5000'
    return _registry_problem(registry)
