"""`sluice run ...` with cProfile switched on and off by SIGRTMIN+3 (each off dumps to $PROFILE_OUT.<n>).

Started by fetch_gap.py --profile (PYTHONMALLOC=malloc, as `sluice run` would exec itself with).
"""

from __future__ import annotations

import cProfile
import os
import signal
import sys

_state: dict = {"profile": None, "n": 0}


def _toggle(_signum: int, _frame: object) -> None:
    profile = _state["profile"]
    if profile is None:
        profile = _state["profile"] = cProfile.Profile()
        profile.enable()
        return
    profile.disable()
    profile.dump_stats(f"{os.environ['PROFILE_OUT']}.{_state['n']}")
    _state["n"] += 1
    _state["profile"] = None


signal.signal(signal.SIGRTMIN + 3, _toggle)

from sluice.proxy.cli import main  # noqa: E402

sys.exit(main())
