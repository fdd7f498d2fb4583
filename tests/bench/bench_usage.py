"""Issue 12: the cost of usage records on the data path, the fleet's accuracy, and the usage topic's size.

* Throughput with usage publishing on vs off (target ratio >= 0.98): `sluice perf-test` (1 KB records,
  unthrottled) through two proxies in front of the same mock cluster, one with `usage.enabled`, one
  without, alternating, several rounds; the medians of records/sec are compared.
* The fleet's accuracy: three proxy processes sharing one quota (`fleet.enabled`), one flat-out
  producer of the same client-id through each, with the sampled window and with the token bucket; the
  fleet's admitted rate (from the usage records, after the start: over whole periods of the window's
  bursts, else the slope of the cumulative bytes; fleet_harness.admitted_rate) / the quota.
* The usage topic's size with 1,000 active entities (tests/bench/usage_topic_size.py).

Run alone: ``.venv/bin/python tests/bench/bench_usage.py`` (one JSON record per line).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleet_harness import QUOTA, admitted_per_interval, admitted_rate, fleet_config, read_usage
from harness import QuietProxy, display, perf_test_command, run_child
from measurements import Record, measurement, median
from mock_cluster_process import MockCluster
from process_stats import cpu_seconds
from throttle_harness import FlatOutProducer
from usage_topic_size import measure as measure_topic_size

TARGET_RATIO = 0.98
TARGET_ACCURACY_PERCENT = 5.0
TOPIC = "perf"
PARTITIONS = 6
RECORD_SIZE = 1024
NUM_RECORDS = 300_000
WARMUP_RECORDS = 30_000
ROUNDS = 5
FLEET_RUN_S = 85
FLEET_START_S = 25


def _rate(bootstrap: str, num_records: int) -> float:
    run = run_child(perf_test_command(bootstrap, TOPIC, num_records, RECORD_SIZE, {"acks": "1"}))
    if run.returncode != 0:
        raise RuntimeError(f"perf-test failed ({run.returncode}): {run.stderr[-1500:]}")
    return float(run.last_line().split(" records sent, ")[1].split(" ")[0])


def _cpu_per_record_us(proxy: QuietProxy, num_records: int) -> tuple[float, float]:
    """(records/s, the proxy's CPU microseconds per record) of one perf-test run through `proxy`."""
    before = cpu_seconds(proxy.pid)
    rate = _rate(proxy.bootstrap, num_records)
    return rate, (cpu_seconds(proxy.pid) - before) / num_records * 1e6


def usage_overhead(rounds: int = ROUNDS, num_records: int = NUM_RECORDS) -> list[Record]:
    rates: dict[str, list[float]] = {"off": [], "on": []}
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    rows: list[list[Any]] = []
    with (
        MockCluster(brokers=3, topics={TOPIC: PARTITIONS}) as cluster,
        QuietProxy(cluster.bootstrap) as plain,
        QuietProxy(cluster.bootstrap, {"usage": {"enabled": True}}) as metered,
    ):
        proxies = {"off": plain, "on": metered}
        for path in ("off", "on"):
            _rate(proxies[path].bootstrap, WARMUP_RECORDS)
        for round_no in range(1, rounds + 1):
            for path in ("off", "on") if round_no % 2 else ("on", "off"):
                rate, us = _cpu_per_record_us(proxies[path], num_records)
                rates[path].append(rate)
                cpu[path].append(us)
                rows.append([round_no, path, f"{rate:,.0f}", f"{us:.3f}"])
    off, on = median(rates["off"]), median(rates["on"])
    cpu_off, cpu_on = median(cpu["off"]), median(cpu["on"])
    command = display(perf_test_command("<BOOTSTRAP>", TOPIC, num_records, RECORD_SIZE, {"acks": "1"}))
    return [
        measurement(
            "usage_records_throughput_on_vs_off",
            round(on / off, 3),
            "x off",
            TARGET_RATIO,
            better="higher",
            title="Produce throughput with usage records on vs off, 1 KB records (median on / median off)",
            table={"columns": ["round", "usage records", "records/s", "proxy CPU us/record"], "rows": rows},
            notes=[
                f"{rounds} rounds of {num_records:,} records, each proxy in turn (who goes first "
                "alternates).",
                f"median off {off:,.0f} records/s, median on {on:,.0f} records/s.",
            ],
            commands=[command + "   # <BOOTSTRAP> = the proxy without / with usage.enabled"],
        ),
        measurement(
            "usage_records_proxy_cpu_on_vs_off",
            round(cpu_on / cpu_off, 3),
            "x off",
            title="The proxy's CPU per record with usage records on vs off (median on / median off)",
            notes=[
                f"median off {cpu_off:.3f} us/record, on {cpu_on:.3f} us/record (CPU clock ticks are 10 ms: "
                "with few records per run this moves in steps).",
                "Less sensitive to the rest of the machine's load than records/s.",
            ],
        ),
    ]


def fleet_accuracy(sensor: str) -> Record:
    with MockCluster(brokers=3, topics={"fleet": PARTITIONS}) as cluster:
        proxies = [QuietProxy(cluster.bootstrap, fleet_config(sensor)) for _ in range(3)]
        try:
            producers = [
                FlatOutProducer(
                    p.bootstrap, "fleet", "pump", partitions=PARTITIONS, **{"queue.buffering.max.kbytes": 256}
                )
                for p in proxies
            ]
            t0 = time.time_ns() // 1_000_000
            for producer in producers:
                producer.start()
            time.sleep(FLEET_RUN_S)
            for producer in producers:
                producer.stop_now()
            for proxy in proxies:
                proxy.stop()
            batches = read_usage(cluster.bootstrap)
        finally:
            for proxy in proxies:
                proxy.close()
    rate = admitted_rate(admitted_per_interval(batches), t0 + FLEET_START_S * 1000, t0 + FLEET_RUN_S * 1000)
    off_by = 100 * (rate / QUOTA - 1)
    return measurement(
        f"fleet_accuracy_{sensor}",
        round(abs(off_by), 2),
        "% off the quota",
        TARGET_ACCURACY_PERCENT,
        better="lower",
        title=f"Three processes, one quota ({sensor}): the fleet's admitted rate vs the quota",
        notes=[
            f"producer_byte_rate {QUOTA:,} B/s for client-id pump, shared (fleet.enabled), 1 s usage "
            "interval; one flat-out librdkafka producer (10 kB records, 16 KiB batches) through each of "
            "three proxies.",
            f"measured: {rate:,.0f} B/s ({off_by:+.2f} %), the fleet's admitted bytes (from the usage "
            f"records) from {FLEET_START_S} s to {FLEET_RUN_S} s over whole periods of the window's bursts, "
            "else the slope of the cumulative bytes (tests/fleet_harness.py: admitted_rate, and why).",
        ],
    )


def usage_topic_size() -> Record:
    result = measure_topic_size(1000, 10)
    return measurement(
        "usage_topic_bytes_per_s_1000_entities",
        result["stored_gzip_bytes_per_interval"],
        "B/s stored (gzip)",
        title="The usage topic with 1,000 active entities, 1 s interval",
        notes=[
            f"{result['json_bytes_per_interval']:,} B of JSON per interval "
            f"({result['json_bytes_per_entity']} B per entity: one entity row with its requests and quota, "
            "one topic row), one message; stored as one gzip record batch of "
            f"{result['stored_gzip_bytes_per_interval']:,} B.",
            "Client-ids service-0000..0999 compress unusually well; expect more with real names.",
        ],
        commands=[".venv/bin/python tests/bench/usage_topic_size.py 1000 10"],
    )


def run() -> list[Record]:
    records = usage_overhead()
    records += [fleet_accuracy("window"), fleet_accuracy("token_bucket"), usage_topic_size()]
    return records


if __name__ == "__main__":
    for record in run():
        print(json.dumps(record))
