"""A pytest session's last line is its pass line, even when a confluent-kafka client outlives its test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import confluent_kafka
import pytest
import quiet_librdkafka

TESTS = Path(__file__).resolve().parent

# A client that reconnects to a closed port for as long as the process lives, and a process that lives
# on for a second after pytest has printed its summary (as a session's teardown and exit can).
LEAKY_TEST = """
import atexit, time
from confluent_kafka import Producer

LEFT_BEHIND = []

def test_leaves_a_client_behind():
    LEFT_BEHIND.append(Producer({"bootstrap.servers": "127.0.0.1:1", "reconnect.backoff.max.ms": 100}))
    LEFT_BEHIND[0].produce("t", b"x")

atexit.register(time.sleep, 1.5)
"""


def run_session(tmp_path: Path, *options: str) -> list[str]:
    test_file = tmp_path / "test_leaky.py"
    test_file.write_text(LEAKY_TEST)
    env = dict(os.environ, PYTHONPATH=str(TESTS))
    quiet = ["-q", "-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function"]
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", *quiet, *options, str(test_file)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, in the order the lines were written
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stdout
    return completed.stdout.strip().splitlines()


@pytest.mark.slow
def test_without_the_plugin_librdkafka_prints_after_the_pass_line(tmp_path: Path) -> None:
    lines = run_session(tmp_path)
    passed = next(i for i, line in enumerate(lines) if " passed in " in line)
    assert any("|FAIL|" in line for line in lines[passed + 1 :]), lines


@pytest.mark.slow
def test_with_the_plugin_the_pass_line_is_last(tmp_path: Path) -> None:
    lines = run_session(tmp_path, "-p", "quiet_librdkafka")
    assert " passed in " in lines[-1], lines
    assert not any("|FAIL|" in line for line in lines), lines


def test_this_session_routes_client_logs_to_python_logging() -> None:
    assert confluent_kafka.Producer is quiet_librdkafka.Producer
    producer = confluent_kafka.Producer({"bootstrap.servers": "127.0.0.1:1"})
    assert isinstance(producer, quiet_librdkafka.Producer)
    producer.flush(0)
