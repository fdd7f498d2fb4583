"""The quota tests' fixtures: the spec's vectors and the model of Kafka's code run on both twins of the
sampled-window rate, quota/window.py's (the reference) and quota/_compiled.c's (what the sensors run)."""

from __future__ import annotations

import pytest

from sluice.quota import compiled, window
from sluice.quota.window import WindowRate


def _twin(name: str) -> type[WindowRate]:
    if name == "python":
        return window.SampledRate
    assert compiled.SampledRate is not None, "built without quota/_compiled.c"
    return compiled.SampledRate


@pytest.fixture(params=["python", "compiled"])
def rate_type(request: pytest.FixtureRequest) -> type[WindowRate]:
    """Each twin of SampledRate in turn."""
    return _twin(request.param)


@pytest.fixture(params=["python", "compiled"])
def sensor_rate(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> type[WindowRate]:
    """Each twin in turn, as the rate of the window sensors the test builds."""
    rate = _twin(request.param)
    monkeypatch.setattr(compiled, "SAMPLED_RATE", rate)
    return rate
