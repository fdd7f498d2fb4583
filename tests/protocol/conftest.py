from __future__ import annotations

from collections.abc import Iterator

import pytest

from sluice.protocol import frames


@pytest.fixture(scope="module", params=["heap pieces", "own mappings"])
def frame_assembly(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a module's splitter tests twice: with frames assembled from their pieces as below a mebibyte,
    and with every frame of 64 bytes or more (a mix of its frames) assembled in a mapping of its own."""
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "own mappings":
            patch.setattr(frames, "OWN_MAPPING_MIN_FRAME_BYTES", 64)
        yield request.param
