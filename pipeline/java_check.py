"""Find Java and check its version before Spark starts, so a missing or old JVM is one clear sentence.

Without this check PySpark fails deep inside its gateway launcher ("Java gateway process exited before
sending its port number") and the operator has to guess why. Spark 4 needs Java 17 or newer.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

MIN_JAVA_MAJOR = 17
# `java -version` prints e.g. `openjdk version "17.0.15" 2025-04-15` or, for Java 8, `"1.8.0_392"`.
_VERSION = re.compile(r'version "(?P<version>[^"]+)"')


class JavaError(RuntimeError):
    """Java is missing, unusable or too old for Spark; the message says which and what to do."""


@dataclass(frozen=True, slots=True)
class JavaInfo:
    executable: str
    version: str
    major: int


def find_java(environ: Mapping[str, str] | None = None) -> str | None:
    """The `java` Spark will start: `$JAVA_HOME/bin/java` when JAVA_HOME is set, else `java` on PATH."""
    env = os.environ if environ is None else environ
    home = env.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        return candidate if os.access(candidate, os.X_OK) else None
    return shutil.which("java", path=env.get("PATH", os.defpath))


def java_major(version: str) -> int:
    """17 for "17.0.15", 8 for "1.8.0_392", 21 for "21-ea"."""
    parts = re.split(r"[._\-+]", version)
    major = int(parts[0]) if parts[0].isdigit() else 0
    if major == 1 and len(parts) > 1 and parts[1].isdigit():
        major = int(parts[1])
    return major


def require_java(minimum: int = MIN_JAVA_MAJOR, environ: Mapping[str, str] | None = None) -> JavaInfo:
    """The Java Spark will use, or JavaError naming what is wrong; never starts Spark itself."""
    env = os.environ if environ is None else environ
    executable = find_java(env)
    if executable is None:
        where = f"JAVA_HOME={env['JAVA_HOME']} has no bin/java" if env.get("JAVA_HOME") else "no java on PATH"
        raise JavaError(
            f"Spark needs Java {minimum} or newer, and none was found ({where}). Install a JDK "
            f"(Debian: apt-get install openjdk-{minimum}-jre-headless) or set JAVA_HOME to one."
        )
    try:
        result = subprocess.run(
            [executable, "-version"], capture_output=True, text=True, timeout=30, env=dict(env)
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaError(f"Spark needs Java {minimum}+, and {executable} -version failed: {exc}") from None
    match = _VERSION.search(result.stderr + result.stdout)
    if result.returncode != 0 or match is None:
        raise JavaError(
            f"Spark needs Java {minimum}+, and {executable} -version did not say which version it is "
            f"(exit code {result.returncode})"
        )
    version = match.group("version")
    major = java_major(version)
    if major < minimum:
        raise JavaError(
            f"Spark needs Java {minimum} or newer; {executable} is Java {version}. Install a newer JDK "
            f"or point JAVA_HOME at one."
        )
    return JavaInfo(executable, version, major)
