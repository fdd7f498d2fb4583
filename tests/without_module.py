"""Running a check in a Python that cannot import one module: what the proxy binds on an install built
without one of its C extensions (each is optional), checked in a subprocess so that the test's own process
keeps its compiled modules."""

from __future__ import annotations

import subprocess
import sys


def check_without(module: str, check: str) -> None:
    """Run `check` (Python source) where `import <module>` fails; its assertions must hold."""
    script = f"import sys; sys.modules[{module!r}] = None\n{check}"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
