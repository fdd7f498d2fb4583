"""Java is checked before Spark starts: missing or too old is one clear sentence and exit code 3."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sluice.pipeline.java_check import JavaError, java_major, require_java


def fake_java(tmp_path, version_line: str) -> str:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return str(home)


def test_versions_are_read_the_way_java_prints_them() -> None:
    assert java_major("17.0.15") == 17 and java_major("1.8.0_392") == 8 and java_major("21-ea") == 21


def test_a_new_enough_java_passes(tmp_path) -> None:
    home = fake_java(tmp_path, 'openjdk version "21.0.2" 2024-01-16')
    info = require_java(environ={"JAVA_HOME": home, "PATH": ""})
    assert info.major == 21


def test_an_old_java_is_named_with_its_version(tmp_path) -> None:
    home = fake_java(tmp_path, 'java version "1.8.0_392"')
    with pytest.raises(JavaError, match=r"Spark needs Java 17 or newer; .* is Java 1\.8\.0_392"):
        require_java(environ={"JAVA_HOME": home, "PATH": ""})


def test_no_java_at_all_says_how_to_get_one(tmp_path) -> None:
    with pytest.raises(JavaError, match=r"no java on PATH.*apt-get install openjdk-17"):
        require_java(environ={"PATH": str(tmp_path)})
    with pytest.raises(JavaError, match="has no bin/java"):
        require_java(environ={"JAVA_HOME": str(tmp_path), "PATH": ""})


def test_the_command_stops_before_spark_with_exit_code_3(tmp_path) -> None:
    env = dict(os.environ, JAVA_HOME=fake_java(tmp_path, 'openjdk version "11.0.2"'))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sluice.proxy",
            "pipeline",
            "report",
            "--input",
            str(tmp_path),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 3
    assert "Spark needs Java 17 or newer" in result.stderr and "Java 11.0.2" in result.stderr
    assert "Traceback" not in result.stderr and "gateway" not in result.stderr
