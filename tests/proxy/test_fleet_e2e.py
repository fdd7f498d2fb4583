"""One quota for a fleet, end to end: real proxies in front of the test broker, real producers, the usage
topic read back with a real client.

Three `sluice run` processes, one flat-out producer of client-id `pump` through each, quota Q. What the
fleet admitted is read from the usage records (tests/fleet_harness.py). The first 25 s are the start
(every process grants its own initial allowance before it hears of the others, and the fleet then pays
that back). The fleet's rate is then measured over the 120 s the issue asks for; the other checks over
less, to stay within the suite's time (sharing off and two workers: 60 s; a death: the 42 s from one
quota window after it). A rate is taken over whole periods of the window's bursts, or as the slope of
the cumulative bytes when there are none (fleet_harness.admitted_rate; docs/fleet.md explains why not a
plain sum).

These tests run one at a time (one xdist group). Three fleets at once on two cores, in one round of
four, all held 0.947-0.961 Q with the window sensor, over whole periods whose bursts spread over five
seconds; one fleet beside two busy loops held 0.99-1.03 Q in three rounds. A fleet's sampled window
turns conservative when the others' reports come late (docs/fleet.md, "Error bounds").
"""

from __future__ import annotations

import contextlib
import time
import urllib.request

import pytest
from fleet_harness import (
    QUOTA,
    admitted_per_interval,
    admitted_rate,
    fleet_config,
    instances_with_traffic,
    read_usage,
    slope,
)
from throttle_harness import FlatOutProducer, metric_value

from sluice.proxy.tools.mock_cluster_process import MockCluster
from sluice.proxy.tools.proxy_process import ProxyProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("fleet")]

TOPIC = "fleet"
PARTITIONS = 6
START_S = 25
RUN_S = 85
FULL_RUN_S = START_S + 120


@pytest.fixture
def cluster():
    with MockCluster(brokers=3, topics={TOPIC: PARTITIONS}) as c:
        yield c


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _wait_for_worker(proxy: ProxyProcess, index: int, timeout_s: float = 20.0) -> None:
    """Until worker `index` (metrics on the metrics port + index) listens for the cluster's brokers."""
    url = f"http://127.0.0.1:{proxy.metrics_port + index}/metrics"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as answer:
            if metric_value(answer.read().decode(), "sluice_broker_listeners") > 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"worker {index} did not get ready:\n{proxy.log_path.read_text()}")


def _producer(bootstrap: str) -> FlatOutProducer:
    # A small local queue: what is still queued when the test ends is purged, not waited for.
    return FlatOutProducer(
        bootstrap, TOPIC, "pump", partitions=PARTITIONS, **{"queue.buffering.max.kbytes": 256}
    )


def _stop_now(producer: FlatOutProducer) -> None:
    """Stop without waiting for queued records: the measurement is over (or the proxy is dead)."""
    producer._stop_flag.set()
    producer.join(30)
    producer.producer.purge()
    producer.producer.flush(5)


def _run_fleet(cluster, config, *, processes: int = 3, kill_at_s: float | None = None, run_s: float = RUN_S):
    proxies = [ProxyProcess(cluster.bootstrap, config, log_level="warning") for _ in range(processes)]
    try:
        producers = [_producer(p.bootstrap) for p in proxies]
        t0 = _wall_ms()
        for producer in producers:
            producer.start()
        killed_at = None
        if kill_at_s is not None:
            time.sleep(kill_at_s)
            proxies[0].process.kill()
            killed_at = _wall_ms()
            _stop_now(producers[0])
        time.sleep(max(0.0, run_s - (_wall_ms() - t0) / 1000))
        for producer in producers[1 if kill_at_s is not None else 0 :]:
            _stop_now(producer)
        for proxy in proxies:
            proxy.stop()
        return t0, killed_at, read_usage(cluster.bootstrap)
    finally:
        for proxy in proxies:
            proxy.close()


@pytest.mark.parametrize("sensor", ["window", "token_bucket"])
def test_three_processes_hold_one_quota(cluster, sensor: str) -> None:
    t0, _, batches = _run_fleet(cluster, fleet_config(sensor), run_s=FULL_RUN_S)
    series = admitted_per_interval(batches)
    rate = admitted_rate(series, t0 + START_S * 1000, t0 + FULL_RUN_S * 1000)
    print(f"{sensor}: fleet admitted {rate:.0f} B/s = {rate / QUOTA:.3f} Q")
    assert len(instances_with_traffic(batches)) == 3  # each process admitted its producer's share
    assert rate == pytest.approx(QUOTA, rel=0.05), f"fleet admitted {rate:.0f} B/s for a quota of {QUOTA}"


def test_without_sharing_three_processes_admit_three_quotas(cluster) -> None:
    t0, _, batches = _run_fleet(cluster, fleet_config("token_bucket", sharing=False))
    rate = slope(admitted_per_interval(batches), t0 + START_S * 1000, t0 + RUN_S * 1000)
    print(f"sharing off: fleet admitted {rate:.0f} B/s = {rate / QUOTA:.3f} Q")
    assert rate == pytest.approx(3 * QUOTA, rel=0.1), f"fleet admitted {rate:.0f} B/s"


@pytest.mark.parametrize("sensor", ["token_bucket", "window"])
def test_one_process_dies_and_the_others_converge_within_one_quota_window(cluster, sensor: str) -> None:
    kill_s = 30
    t0, killed_at, batches = _run_fleet(cluster, fleet_config(sensor), kill_at_s=kill_s)
    assert killed_at is not None
    survivors = instances_with_traffic([b for b in batches if b.interval_start_ms > killed_at + 2000])
    assert len(survivors) == 2
    series = admitted_per_interval(batches, instances=survivors)
    # One quota window (N x W = 11 s) after the death, plus the two seconds it takes to notice it.
    rate = admitted_rate(series, killed_at + 13_000, t0 + RUN_S * 1000)
    # A sampled window's rate over 42 s holds only four of its ~11 s bursts, hence the wider margin.
    margin = 0.05 if sensor == "token_bucket" else 0.08
    print(f"{sensor}: survivors admitted {rate:.0f} B/s = {rate / QUOTA:.3f} Q")
    assert rate == pytest.approx(QUOTA, rel=margin), f"survivors admitted {rate:.0f} B/s"


def test_two_workers_on_one_machine_hold_one_quota(cluster) -> None:
    config = fleet_config("token_bucket")
    with ProxyProcess(cluster.bootstrap, config, log_level="warning", run_args=["--workers", "2"]) as proxy:
        _wait_for_worker(proxy, 1)  # worker 0 is ready (ProxyProcess waited); connections then spread
        producers = [_producer(proxy.bootstrap) for _ in range(3)]
        t0 = _wall_ms()
        for producer in producers:
            producer.start()
        time.sleep(RUN_S)
        for producer in producers:
            _stop_now(producer)
        proxy.stop()
    batches = read_usage(cluster.bootstrap)
    rate = slope(admitted_per_interval(batches), t0 + START_S * 1000, t0 + RUN_S * 1000)
    print(f"--workers 2: admitted {rate:.0f} B/s = {rate / QUOTA:.3f} Q")
    assert len({batch.instance for batch in batches}) == 2  # two workers, each publishing
    assert len(instances_with_traffic(batches)) == 2  # the kernel spread the connections over both
    assert rate == pytest.approx(QUOTA, rel=0.05), f"two workers admitted {rate:.0f} B/s"
