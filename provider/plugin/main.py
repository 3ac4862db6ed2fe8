"""`terraform-provider-gpucloud`: the gpucloud provider executable.

    terraform-provider-gpucloud                      what Terraform runs (go-plugin handshake)
    terraform-provider-gpucloud --debug              reattach mode for debugging
    terraform-provider-gpucloud install --mirror DIR [--version V]
                                                     write a filesystem mirror, print the CLI config

The plain launch path imports nothing beyond `provider.plugin.launch` before the handshake line;
argparse and the provider itself are loaded only when needed.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # `typing` costs ~4 ms to import; mypy treats this name as True
if TYPE_CHECKING:
    import argparse

NAMESPACE = "gpucloud"
TYPE_NAME = "gpucloud"
PROVIDER_ADDRESS = f"registry.terraform.io/{NAMESPACE}/{TYPE_NAME}"
PROGRAM = f"terraform-provider-{TYPE_NAME}"
# Imported ahead by the warm daemon (provider.plugin.warm_daemon): a cold launch loads httpx, httpcore and
# tenacity and builds its TLS context (~150 ms) only in ConfigureProvider, and the schema's messages in
# GetProviderSchema; a warm one finds them ready (provider.resources.preload).
WARM_IMPORTS = ("provider.resources.preload",)


def make_provider_server() -> object:
    """The gpucloud provider wrapped in the framework's protocol server (imported only now: slow)."""
    from provider.framework.server import ProviderServer
    from provider.resources.provider import GpuCloudProvider  # type: ignore[import-not-found, unused-ignore]

    return ProviderServer(GpuCloudProvider())


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    from provider.plugin.launch import serve

    if not args:
        serve(make_provider_server, debug=False, provider_address=PROVIDER_ADDRESS)
        return
    options = _parse(args)
    if options.command == "install":
        _install(options.mirror, options.version)
    else:
        serve(make_provider_server, debug=True, provider_address=PROVIDER_ADDRESS)


def _parse(args: list[str]) -> argparse.Namespace:
    import argparse

    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="The gpucloud Terraform provider. Terraform runs it; humans install or debug it.",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="serve in reattach mode and print the TF_REATTACH_PROVIDERS value",
    )
    commands = parser.add_subparsers(dest="command")
    install = commands.add_parser(
        "install", help="write a filesystem mirror for terraform init and print the CLI config block"
    )
    install.add_argument("--mirror", required=True, help="mirror directory (created if missing)")
    install.add_argument("--version", help="provider version to publish (default: the installed package's)")
    options = parser.parse_args(args)
    if options.command is None and not options.debug:
        parser.error("nothing to do: Terraform runs this without arguments; see --help")
    return options


def _install(mirror: str, version: str | None) -> None:
    from importlib.metadata import version as package_version

    from provider.plugin.install import cli_config_block, write_mirror

    resolved = version or package_version("gpucloud")
    launcher = write_mirror(
        mirror,
        namespace=NAMESPACE,
        type_name=TYPE_NAME,
        version=resolved,
        launch_module="provider.plugin.main",
    )
    sys.stderr.write(f"Installed {PROVIDER_ADDRESS} {resolved} at {launcher}\n")
    sys.stderr.write(
        "Put this block in your Terraform CLI configuration (~/.terraformrc or TF_CLI_CONFIG_FILE):\n"
    )
    sys.stdout.write(cli_config_block(mirror, [PROVIDER_ADDRESS]))


if __name__ == "__main__":
    main()
