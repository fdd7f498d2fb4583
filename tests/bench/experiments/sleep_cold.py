"""Does the same Python cost more after the process slept longer? One Fetch v12 exchange through the chain
(per_request_cost.py's: a ~94 KB answer), under several configurations, timed on the thread CPU clock
after the thread idled for gaps of 0-30 ms. (It was written for gaps of ~4 ms between fetch-16k exchanges
and ~16 ms between fetch-64k ones, read from the ~21 MB/s of section 2b's fetch runs; that pace was the
bench client's, whose passes each ended in a second's wait, and within a pass the exchanges came ~0.3-1.5
ms apart: tests/bench/real_clients_profile.md, "The fetch runs' pace was the bench client's".)

Run: ``.venv/bin/python tests/bench/experiments/sleep_cold.py [--samples 200] [--spin]
[--variants none,both,...]``: the median µs per exchange for each gap and configuration, interleaved.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import per_request_cost as prc
from fetch_gap import VARIANTS

from sluice.config.load import config_from_mapping
from sluice.protocol.frames import FrameSplitter
from sluice.proxy.data_path.connection import ClientSide
from sluice.proxy.data_path.request_pipeline import RequestPipeline
from sluice.proxy.process.server import SluiceServer

# With --parts: the chain's calls timed one by one (inclusive, each wrapper two thread CPU clock reads).
PARTS = [
    ("sluice.proxy.data_path.request_pipeline", "RequestPipeline", ["client_frames", "broker_frames"]),
    ("sluice.proxy.data_path.filter_chain", "ConnectionFilters", ["on_request", "on_response"]),
    ("sluice.proxy.filters.client_quotas", "ClientQuotas", ["on_request", "on_response"]),
    ("sluice.proxy.filters.usage_recorder", "UsageRecorder", ["on_request", "on_response"]),
    ("sluice.proxy.filters.broker_rewrite", "BrokerAddressRewrite", ["on_response"]),
]
_part_ns: defaultdict[str, int] = defaultdict(int)


def _wrap_parts() -> None:
    clock = time.thread_time_ns
    for module, class_name, methods in PARTS:
        cls = getattr(importlib.import_module(module), class_name)
        for name in methods:
            key, method = f"{class_name}.{name}", getattr(cls, name)

            def timed(*args: Any, _key: str = key, _method: Callable[..., Any] = method, **kw: Any) -> Any:
                started = clock()
                try:
                    return _method(*args, **kw)
                finally:
                    _part_ns[_key] += clock() - started

            setattr(cls, name, functools.wraps(method)(timed))


def _pipeline(extra: dict[str, Any] | None) -> tuple[RequestPipeline, prc._Sink, ClientSide]:
    config = config_from_mapping(
        {"listen": "127.0.0.1:9092", "upstream": {"bootstrap": ["127.0.0.1:19092"]}, **(extra or {})}
    )
    server = SluiceServer(config)
    conn = prc._connection()
    filters = server.settings.chain.for_connection(conn, lambda _ms: None)  # type: ignore[arg-type]
    sink = prc._Sink()
    pipeline = RequestPipeline(
        filters, prc._Gate(), sink, server.settings.metrics, FrameSplitter(1 << 26), FrameSplitter(1 << 26)
    )
    pipeline.upstream_ready()
    request, answer = prc._metadata_exchange()
    pipeline.client_frames([memoryview(request)])
    pipeline.outgoing = []
    pipeline.broker_frames([memoryview(answer)])
    sink.sent.clear()
    return pipeline, sink, conn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--gaps", default="0,1,4,16,30")
    parser.add_argument("--variants", default="none,both")
    parser.add_argument("--parts", action="store_true", help="also time the chain's calls one by one")
    parser.add_argument("--spin", action="store_true", help="wait by spinning on the clock, not sleeping")
    args = parser.parse_args()
    gaps = [float(g) for g in args.gaps.split(",")]
    if args.parts:
        _wrap_parts()
    chains = {}
    for name in args.variants.split(","):
        pipeline, sink, conn = _pipeline(VARIANTS[name])
        chains[name] = prc._exchange(
            pipeline, sink, conn, [prc._fetch(12, 100)], [prc._fetch_answer(12, 100)]
        )
    clock = time.thread_time_ns
    spent: dict[tuple[str, float], list[float]] = {(n, g): [] for n in chains for g in gaps}
    parts: dict[tuple[str, float, str], list[float]] = defaultdict(list)
    for _ in range(args.samples):
        for gap in gaps:
            for name, passes in chains.items():
                if gap and args.spin:
                    until = time.perf_counter() + gap / 1000
                    while time.perf_counter() < until:
                        pass
                elif gap:
                    time.sleep(gap / 1000)  # the measured idle gap itself (a proxy's wait in epoll)
                _part_ns.clear()
                started = clock()
                for one_pass in passes:
                    one_pass()
                spent[(name, gap)].append((clock() - started) / 1000)
                for part, ns in _part_ns.items():
                    parts[(name, gap, part)].append(ns / 1000)
    print("gap ms  " + "  ".join(f"{n:>12}" for n in chains))
    for gap in gaps:
        print(f"{gap:6.0f}  " + "  ".join(f"{statistics.median(spent[(n, gap)]):10.2f}us" for n in chains))

    for gap in gaps if args.parts else ():
        print(f"gap {gap:.0f} ms, the chain's calls (median us per exchange):")
        for part in sorted({p for (_, g, p) in parts if g == gap}):
            medians = [statistics.median(parts.get((n, gap, part)) or [0.0]) for n in chains]
            print(f"  {part:32}  " + "  ".join(f"{m:10.2f}us" for m in medians))


if __name__ == "__main__":
    main()
