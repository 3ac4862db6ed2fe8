"""Test-only provider `registry.terraform.io/gpucloud/conformance` (not shipped).

It exercises every type and framework feature through real Terraform: see acceptance/test_conformance_*.py.
Remote objects live in a JSON file (provider attribute `store`, env CONFORMANCE_STORE, default
`conformance-store.json` in Terraform's working directory) so they outlive each provider process.
"""
