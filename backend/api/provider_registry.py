"""Terraform installs the provider from the backend: the provider registry protocol (`source =
"<backend host>/gpucloud/gpucloud"`, found through `/.well-known/terraform.json`) and the provider
network mirror protocol (a `network_mirror` block at `/v1/mirror/`). Public and read-only, like any
registry: packages are signed, and Terraform checks them against SHA256SUMS and the signature.

URLs in the answers are path-absolute: Terraform resolves them against the document's own URL, so they
stay right behind a TLS-terminating proxy.
"""

from __future__ import annotations

import structlog
from fastapi import APIRouter, Request
from starlette.responses import FileResponse, JSONResponse, Response

from backend.api.problems import problem_response, request_id_of
from backend.api.state import app_state
from backend.services.provider_packages import (
    NAMESPACE,
    PROTOCOLS,
    TYPE_NAME,
    ProviderPackages,
    SigningKeyError,
)

router = APIRouter(tags=["provider registry"], include_in_schema=False)
PACKAGE_FILES = "/v1/provider-packages/"
_log = structlog.get_logger("gpucloud.registry")


def _packages(request: Request) -> ProviderPackages:
    return app_state(request).provider_packages


def _not_found(request: Request, detail: str) -> Response:
    return problem_response(status=404, code="not_found", detail=detail, request_id=request_id_of(request))


def _unknown_provider(request: Request, namespace: str, type_name: str) -> Response | None:
    if (namespace, type_name) == (NAMESPACE, TYPE_NAME):
        return None
    served = f"{NAMESPACE}/{TYPE_NAME}"
    return _not_found(request, f"this registry serves {served} only, not {namespace}/{type_name}")


@router.get("/.well-known/terraform.json")
def service_discovery() -> JSONResponse:
    """Terraform's service discovery: where the provider registry protocol lives."""
    return JSONResponse({"providers.v1": "/v1/providers/"})


@router.get("/v1/providers/{namespace}/{type_name}/versions")
def provider_versions(request: Request, namespace: str, type_name: str) -> Response:
    """Every signed version with its platforms."""
    if (problem := _unknown_provider(request, namespace, type_name)) is not None:
        return problem
    versions = [
        {
            "version": version,
            "protocols": list(PROTOCOLS),
            "platforms": [{"os": p.os, "arch": p.arch} for p in sorted(packages, key=lambda p: p.platform)],
        }
        for version, packages in sorted(_packages(request).versions().items())
    ]
    return JSONResponse({"versions": versions})


@router.get("/v1/providers/{namespace}/{type_name}/{version}/download/{os}/{arch}")
def provider_download(request: Request, namespace: str, type_name: str, version: str, os: str, arch: str
                      ) -> Response:
    """Where to download one platform's package, its SHA256SUMS, their signature and the signing key."""
    if (problem := _unknown_provider(request, namespace, type_name)) is not None:
        return problem
    packages = _packages(request)
    package = packages.package(version, os, arch)
    if package is None:
        return _not_found(request, f"no package of {NAMESPACE}/{TYPE_NAME} {version} for {os}_{arch}")
    try:
        key = packages.signing_key()
    except (SigningKeyError, FileNotFoundError) as error:
        # The operator's log names the file and the fix; the public answer names neither.
        _log.error("registry.signing_key_refused", error=str(error))
        return problem_response(
            status=503, code="signing_key_unavailable", request_id=request_id_of(request),
            detail="the registry's signing key cannot be served; the operator's log says why",
        )
    sums = PACKAGE_FILES + packages.sums_filename(version)
    return JSONResponse({
        "protocols": list(PROTOCOLS),
        "os": os,
        "arch": arch,
        "filename": package.filename,
        "download_url": PACKAGE_FILES + package.filename,
        "shasums_url": sums,
        "shasums_signature_url": sums + ".sig",
        "shasum": package.sha256,
        "signing_keys": {
            "gpg_public_keys": [
                {"key_id": key.key_id, "ascii_armor": key.ascii_armor, "trust_signature": "",
                 "source": "gpucloud", "source_url": None},
            ]
        },
    })


@router.get(PACKAGE_FILES + "{filename}")
def provider_package_file(request: Request, filename: str) -> Response:
    """A package, SHA256SUMS or signature file of a signed version."""
    path = _packages(request).served_file(filename)
    if path is None:
        return _not_found(request, f"no provider package file named {filename!r}")
    return FileResponse(path, media_type="application/octet-stream" if not filename.endswith("SUMS")
                        else "text/plain")


@router.get("/v1/mirror/{hostname}/{namespace}/{type_name}/index.json")
def mirror_index(request: Request, hostname: str, namespace: str, type_name: str) -> Response:
    """Network mirror: the versions available (for the provider under any hostname it is addressed by)."""
    if (problem := _unknown_provider(request, namespace, type_name)) is not None:
        return problem
    return JSONResponse({"versions": {version: {} for version in sorted(_packages(request).versions())}})


@router.get("/v1/mirror/{hostname}/{namespace}/{type_name}/{version}.json")
def mirror_version(request: Request, hostname: str, namespace: str, type_name: str, version: str) -> Response:
    """Network mirror: one version's packages with their `h1:` and `zh:` hashes."""
    if (problem := _unknown_provider(request, namespace, type_name)) is not None:
        return problem
    packages = _packages(request)
    found = packages.versions().get(version)
    if not found:
        return _not_found(request, f"no version {version} of {NAMESPACE}/{TYPE_NAME}")
    archives = {
        p.platform: {"url": PACKAGE_FILES + p.filename, "hashes": [packages.h1(p), f"zh:{p.sha256}"]}
        for p in sorted(found, key=lambda p: p.platform)
    }
    return JSONResponse({"archives": archives})
