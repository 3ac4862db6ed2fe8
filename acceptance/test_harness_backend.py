"""The backend_server fixture: a real backend the real gpucloud provider reaches, on both Terraforms."""

from __future__ import annotations

import httpx

from acceptance.backend import Backend
from acceptance.harness import TerraformFactory

REGIONS = """
    terraform {
      required_providers {
        gpucloud = { source = "gpucloud/gpucloud" }
      }
    }

    data "gpucloud_regions" "all" {}

    output "region_names" {
      value = [for region in data.gpucloud_regions.all.regions : region.name]
    }
"""


def test_harness_backend_server_reached_by_the_gpucloud_provider_on_each_version(
    terraform: TerraformFactory, backend_server: Backend
) -> None:
    # One test, one backend start: the fixture itself, then the provider reaching it.
    url, auth = backend_server.url, {"Authorization": f"Bearer {backend_server.api_key}"}
    assert httpx.get(f"{url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{url}/v1/ssh-keys").status_code == 401
    assert httpx.get(f"{url}/v1/ssh-keys", headers=auth).status_code == 200  # an admin key of its project
    assert (backend_server.data_dir / "gpucloud.db").is_file()  # its own fresh SQLite store

    expected = [region["name"] for region in httpx.get(f"{url}/v1/regions", headers=auth).json()["items"]]
    assert expected
    for version in ("1.11", "1.15"):
        tf = terraform(version, env=backend_server.provider_env)
        tf.write_main(REGIONS)
        tf.init()
        tf.apply()
        assert tf.output_json()["region_names"]["value"] == expected, version
        tf.assert_plan_empty()
