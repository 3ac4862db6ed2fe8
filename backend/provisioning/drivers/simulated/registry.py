"""The modelled container registries an IMAGES_IMPORT pulls from: every reference resolves to a stable
digest and size drawn from the seed, except where the model's rules say otherwise, so tests and demos can
produce each failure a real registry gives (the messages are the local driver's, see
backend.provisioning.images):

- a registry host under `.invalid` (a reserved top-level domain) cannot be reached;
- a tag beginning with `missing` (or a repository whose last part is `missing`) does not exist;
- a repository beginning with `private/` needs credentials for its registry; a password beginning with
  `wrong` is refused;
- a repository whose last part ends with `-arm64` has only a linux/arm64 variant (the nodes run amd64);
- a repository whose last part contains `huge` is 2 TiB unpacked, more than a cluster's image storage
  (`IMAGE_STORAGE_BYTES`).
Other images are 0.2-16 GiB unpacked; a pull takes 20 s plus 4 s per GiB.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from backend.provisioning import images
from backend.provisioning.driver import ImageOutcome

IMAGE_STORAGE_BYTES = 1024**4  # what a simulated cluster's shared storage holds for images: 1 TiB
GIB = 1024**3
PULL_BASE_SECONDS, PULL_SECONDS_PER_GIB = 20.0, 4.0


def pull(seed: int, wanted: tuple[tuple[str, str], ...],
         credentials: Mapping[str, images.RegistryCredentials]) -> tuple[tuple[ImageOutcome, ...], float]:
    """Each (name, reference) imported or refused, and the modelled seconds the whole import takes."""
    outcomes = []
    seconds = 0.0
    used = 0
    for name, reference in wanted:
        ref = images.parse_image_ref(reference)
        try:
            digest, size = _resolve(seed, ref, credentials.get(ref.registry))
            if used + size > IMAGE_STORAGE_BYTES:
                raise images.ImageImportError(
                    "too_large", f"image {ref} is {images.human_size(size)} unpacked, more than the "
                    f"{images.human_size(IMAGE_STORAGE_BYTES - used)} left of the cluster's image storage; "
                    "use a smaller image")
        except images.ImageImportError as exc:
            outcomes.append(ImageOutcome(name, reference, error=f'container_images["{name}"]: {exc.message}'))
            seconds += 2.0
            continue
        used += size
        seconds += PULL_BASE_SECONDS + PULL_SECONDS_PER_GIB * size / GIB
        outcomes.append(ImageOutcome(name, reference, digest=digest, size_bytes=size))
    return tuple(outcomes), seconds


def _resolve(seed: int, ref: images.ImageRef, login: images.RegistryCredentials | None) -> tuple[str, int]:
    policy = images.TransportPolicy()

    def refused(stderr: str) -> images.ImageImportError:
        return images.classify_skopeo_failure(ref, stderr, has_credentials=login is not None, policy=policy)

    last = ref.repository.rsplit("/", 1)[-1]
    if ref.host.endswith(".invalid"):
        raise refused(f"dial tcp: lookup {ref.host}: no such host")
    if ref.repository.startswith("private/") and (login is None or login.password.startswith("wrong")):
        raise refused("reading manifest: unauthorized: authentication required")
    if (ref.tag or "").startswith("missing") or last == "missing":
        raise refused("reading manifest: manifest unknown")
    if last.endswith("-arm64"):
        raise images.ImageImportError(
            "foreign_architecture", f"image {ref} has no linux/amd64 variant (it offers linux/arm64); use an "
            "image built for linux/amd64")
    draw = hashlib.sha256(f"{seed}|image|{ref.name}|{ref.tag}|{ref.digest}".encode()).digest()
    digest = ref.digest or f"sha256:{draw.hex()}"
    size = 2 * 1024 * GIB if "huge" in last else int((0.2 + 15.8 * draw[0] / 255) * GIB)
    return digest, size
