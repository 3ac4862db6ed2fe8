"""The `gpucloud` command line: the backend API for people who operate clusters rather than codify them.

Built on `provider.client` (no HTTP code of its own) with Click and Rich. The Terraform plugin never
imports this package, so its start-up does not pay for Click or Rich.
"""
