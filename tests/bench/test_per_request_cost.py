"""The in-process micro-benchmark of section 2b's appendix (experiments/per_request_cost.py), and the one
built on it (experiments/sleep_cold.py), run what they say they time: the chain `sluice run` builds, on a
real ClientSide whose queries the filters ask (compiled where the install has them), every request of a read
forwarded and every answer sent to the client. Neither runs in CI otherwise; a change that breaks them
fails here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "experiments"))

import per_request_cost as prc
import sleep_cold

from sluice.protocol.frames import FrameSplitter
from sluice.proxy.data_path.connection import QUERIES_IN_PYTHON, ClientSide


@pytest.mark.parametrize("plain", [False, True], ids=["quotas and usage records", "plain"])
def test_a_read_of_pipelined_produce_requests_is_forwarded_and_answered_whole(plain: bool) -> None:
    pipeline, sink, conn = prc._pipeline(plain)
    assert type(conn) is ClientSide
    assert ClientSide.now_ms is not QUERIES_IN_PYTHON["now_ms"], "the benchmark asks the compiled queries"
    requests = [prc._produce(i, i % prc.PARTITIONS) for i in range(prc.PIPELINED)]
    answers = [prc._produce_answer(i, i % prc.PARTITIONS) for i in range(prc.PIPELINED)]
    conn._last_read = conn._loop.time()  # read now, as the connection's read sets it
    pipeline.client_frames(FrameSplitter(1 << 26).feed(b"".join(requests)))
    assert [bytes(f) for f in pipeline.outgoing] == requests
    pipeline.outgoing = []
    pipeline.broker_frames(FrameSplitter(1 << 26).feed(b"".join(answers)))
    assert len(sink.sent) == prc.PIPELINED
    assert not plain or [bytes(f) for f in sink.sent] == answers  # (quotas may rewrite throttle_time_ms)


class _Kept(list[object]):
    def clear(self) -> None:
        pass


@pytest.mark.parametrize("version", [12, 16])
def test_a_fetch_exchange_of_each_benchmark_goes_through(version: int) -> None:
    for pipeline, sink, conn in (prc._pipeline(False), sleep_cold._pipeline(None)):
        assert type(conn) is ClientSide
        requests_pass, answers_pass = prc._exchange(
            pipeline, sink, conn, [prc._fetch(version, 7)], [prc._fetch_answer(version, 7)]
        )
        sent = _Kept()
        sink.sent = sent  # what the next answers' pass sends, kept past the pass's clearing
        requests_pass()
        answers_pass()
        assert len(sent) == 1
