"""The name the package is installed by, in the one place the proxy and the pipeline both read.

`sluice` on PyPI is an unrelated project, so the distribution is `sluice-kafka`; the command and the
import name stay `sluice`."""

from __future__ import annotations

DISTRIBUTION = "sluice-kafka"


def install_hint(extra: str) -> str:
    """How to add an optional extra, installed from a package index or from a clone."""
    return f"pip install '{DISTRIBUTION}[{extra}]' (in a clone: pip install '.[{extra}]')"
