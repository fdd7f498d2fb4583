"""The `sluice` subcommands that belong to the proxy itself (the tools live in `sluice.proxy.tools`)."""
