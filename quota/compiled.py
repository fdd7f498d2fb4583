"""The compiled sampled-window rate (quota/_compiled.c), or None where this install was built without it
(no C compiler at hand: the build goes on without it, pyproject.toml).

`SampledRate` is the translation of quota/window.py's SampledRate, which stays the reference and runs in
its place when it is None; tests/quota/test_compiled_window.py holds the two equal. Why it exists: every
Produce request and every answer is charged to a window sensor, and in Python a record with its check is
three calls into the rate plus the throttle arithmetic; compiled, it is one call, `record_and_throttle`
(docs/architecture.md, "Compiled readers").

`SAMPLED_RATE` is the one the quota engine builds, chosen here once: the window sensors' rates and the
broker shield's bytes-in rates. Its contract is the engine's use of it: int or float values (a sum of ints
stays exact below 2^53, bytes in one window), times within +-2^60 ms and windows of N x W up to 2^60 ms
(the config caps them at 24.8 days); the Python twin also takes what the engine never passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.quota import window

if TYPE_CHECKING:
    from sluice.quota._compiled import SampledRate as CompiledSampledRate

__all__ = ["SAMPLED_RATE", "SampledRate"]

SampledRate: type[CompiledSampledRate] | None = None

try:
    from sluice.quota import _compiled
except ImportError:  # built without a C compiler
    pass
else:
    SampledRate = _compiled.SampledRate

SAMPLED_RATE: type[window.SampledRate] | type[CompiledSampledRate] = (
    window.SampledRate if SampledRate is None else SampledRate
)
