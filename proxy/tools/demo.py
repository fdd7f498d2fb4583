"""`sluice demo`: Sluice throttling three real producers in front of a local test broker.

librdkafka's mock cluster (3 brokers) runs as a child process, the proxy as another, with
`producer_byte_rate` quotas for client-ids `alpha` (100 kB/s) and `beta` (250 kB/s); `gamma` has no quota.
Three confluent-kafka producers send 10 kB records through Sluice: alpha and beta flat out, gamma paced by
itself at 500 kB/s. Every second the demo prints what each producer got delivered and the throttle time it
was told; then a consumer group reads alpha's and beta's records back through Sluice (count + checksum),
and the demo prints the traffic Sluice relayed, a summary table and a PNG chart of the per-second rates.
Everything runs on 127.0.0.1 and stops by itself; the exit code is 0 only if every check passed.

Why this module is long: one script a reader follows top to bottom (cluster, proxy, clients, live lines,
summary, chart).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .mock_cluster_process import MockCluster
from .proxy_process import ProxyProcess

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message, Producer, ThrottleEvent

PARTITIONS = 6
RECORD_SIZE = 10_000
DEFAULT_SECONDS = 30
DEFAULT_CHART = Path("out") / "demo-throughput.png"
# The token bucket's one burst (N x W x quota, 11 s worth) drains in the first second or two; the window
# sensor's comb repeats every ~11 s, so with it no warm-up makes a short run's average exact.
MAX_WARM_UP_S = 12
SENSORS = ("token_bucket", "window")
_ONE_KB = 1000  # rates are shown in kB/s, as quotas are usually written (100000 = 100 kB/s)


@dataclass(frozen=True)
class ProducerPlan:
    client_id: str
    quota: int | None  # producer_byte_rate Sluice enforces, bytes/s; None: no quota
    pace: int | None  # the client's own rate limit, bytes/s; None: flat out
    read_back: bool  # whether the consumer checks this producer's records afterwards

    @property
    def topic(self) -> str:
        return f"demo-{self.client_id}"


PLANS = (
    ProducerPlan("alpha", quota=100_000, pace=None, read_back=True),
    ProducerPlan("beta", quota=250_000, pace=None, read_back=True),
    # Paced because an unthrottled flat-out producer would overrun the mock's ~5 MB per partition.
    ProducerPlan("gamma", quota=None, pace=500_000, read_back=False),
)


def record_value(client_id: str, i: int, size: int = RECORD_SIZE) -> bytes:
    """Distinct, reproducible content per record, so the read-back checksum would catch any mix-up."""
    seed = hashlib.sha256(f"{client_id}:{i}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def order_free_digest(record_hashes: Sequence[bytes]) -> str:
    # A consumer sees partitions interleaved, so compare the sorted per-record hashes.
    return hashlib.sha256(b"".join(sorted(record_hashes))).hexdigest()


class DemoProducer(threading.Thread):
    """One confluent-kafka producer; counts delivered bytes and told throttles per second since `started`."""

    def __init__(self, bootstrap: str, plan: ProducerPlan, started: float) -> None:
        super().__init__(name=f"demo-{plan.client_id}", daemon=True)
        # Imported here: confluent-kafka is an optional extra, and `sluice run` must not need it.
        import confluent_kafka

        self.plan = plan
        self.started = started
        self.sent = 0
        self.delivered = 0
        self.errors: list[str] = []
        self.sent_hashes: list[bytes] = []
        self.bytes_by_second: dict[int, int] = {}
        self.throttles_by_second: dict[int, list[int]] = {}
        self._stop_flag = threading.Event()
        self.producer: Producer | None = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": plan.client_id,
                "linger.ms": 0,
                "batch.size": 16384,
                # A small local queue: what is queued when the demo stops must drain at the quota rate.
                "queue.buffering.max.kbytes": 128,
                "message.timeout.ms": 120_000,
                "throttle_cb": self._on_throttle,
            }
        )

    def _second(self) -> int:
        return int(time.monotonic() - self.started)

    def _on_throttle(self, event: ThrottleEvent) -> None:
        # librdkafka reports seconds as a float, and also reports the return to zero.
        throttle_ms = round(event.throttle_time * 1000)
        if throttle_ms > 0:
            self.throttles_by_second.setdefault(self._second(), []).append(throttle_ms)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        self.delivered += 1
        second = self._second()
        self.bytes_by_second[second] = self.bytes_by_second.get(second, 0) + len(msg.value() or b"")

    def run(self) -> None:
        producer = self.producer
        assert producer is not None, "a DemoProducer runs once"
        pace = self.plan.pace
        while not self._stop_flag.is_set():
            if pace is not None:
                due = self.started + self.sent * RECORD_SIZE / pace
                wait = due - time.monotonic()
                if wait > 0:
                    # Sleep by polling, so delivery reports keep their timing.
                    producer.poll(min(wait, 0.05))
                    continue
            value = record_value(self.plan.client_id, self.sent)
            try:
                producer.produce(self.plan.topic, value, on_delivery=self._on_delivery)
            except BufferError:
                producer.poll(0.05)
                continue
            if self.plan.read_back:
                self.sent_hashes.append(hashlib.sha256(value).digest())
            self.sent += 1
            producer.poll(0)

    def stop(self) -> None:
        self._stop_flag.set()

    def finish(self, timeout_s: float = 60.0) -> None:
        self.stop()
        self.join(10)
        producer = self.producer
        assert producer is not None, "finish() is called once"
        left = producer.flush(timeout_s)
        if left:
            self.errors.append(f"{left} records not delivered within {timeout_s:.0f} s")
        # The client holds our bound callbacks and we hold it: drop our end so it is destroyed now, before
        # the proxy stops, instead of reconnecting (and logging) until the garbage collector gets to it.
        self.producer = None
        del producer

    def rate(self, second: int) -> float:
        return float(self.bytes_by_second.get(second, 0))

    def average_rate(self, from_s: int, to_s: int) -> float:
        return sum(self.rate(s) for s in range(from_s, to_s)) / max(1, to_s - from_s)

    def told(self, second: int | None = None) -> list[int]:
        if second is not None:
            return self.throttles_by_second.get(second, [])
        return [ms for values in self.throttles_by_second.values() for ms in values]


def _kbps(rate: float) -> str:
    return f"{rate / _ONE_KB:,.1f}"


def _told_text(told: list[int]) -> str:
    return f"{len(told)} response{'s' if len(told) > 1 else ''}, max {max(told):,} ms" if told else "none"


def _live_line(second: int, producer: DemoProducer, first: bool) -> str:
    rate = producer.rate(second)
    quota = producer.plan.quota
    against = f"{_kbps(quota):>7} kB/s {rate / quota:6.2f}x" if quota else f"{'(no quota)':<19}"
    stamp = f"{second:>3}-{second + 1:>2} s" if first else " " * 9
    told = _told_text(producer.told(second))
    return f"  {stamp} {producer.plan.client_id:<6} {_kbps(rate):>9} kB/s of {against}  told: {told}"


def _run_producers(bootstrap: str, seconds: int) -> list[DemoProducer]:
    started = time.monotonic()
    producers = [DemoProducer(bootstrap, plan, started) for plan in PLANS]
    for producer in producers:
        producer.start()
    try:
        _print_live(producers, started, seconds)
    finally:
        print("  stopping the producers and flushing what they still hold ...")
        for producer in producers:
            producer.stop()
        for producer in producers:
            producer.finish()
    return producers


def _print_live(producers: Sequence[DemoProducer], started: float, seconds: int) -> None:
    print(f"\n  {'second':<9} {'client':<6} {'delivered':>14} {'quota':>15} {'ratio':>6}  throttle told")
    for second in range(seconds):
        # Wait a little past the second's end: delivery reports are served by polls every <= 50 ms.
        time.sleep(max(0.0, started + second + 1.1 - time.monotonic()))
        for index, producer in enumerate(producers):
            print(_live_line(second, producer, index == 0), flush=True)


def _read_back(bootstrap: str, expected: dict[str, int], timeout_s: float = 90.0) -> dict[str, list[bytes]]:
    """Per topic, the sha256 of every record a fresh consumer group reads through the proxy."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"demo-{uuid.uuid4()}",
            "client.id": "demo-consumer",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(list(expected))
    hashes: dict[str, list[bytes]] = {topic: [] for topic in expected}
    deadline = time.monotonic() + timeout_s
    started = time.monotonic()
    while any(len(hashes[t]) < n for t, n in expected.items()) and time.monotonic() < deadline:
        for msg in consumer.consume(1000, timeout=1.0):
            if msg.error() is None:
                hashes[msg.topic()].append(hashlib.sha256(msg.value()).digest())
    consumer.close()
    got = sum(len(v) for v in hashes.values())
    print(f"  consumer  read {got:,} records in {time.monotonic() - started:.1f}s")
    return hashes


def _traffic_table(metrics_text: str) -> list[tuple[str, int, int, int]]:
    """(api, requests, request bytes, response bytes) per API, from the proxy's Prometheus endpoint."""
    values: dict[tuple[str, str], float] = {}
    pattern = re.compile(r'^(sluice_\w+)_total\{api="(\w+)"\} ([0-9.e+]+)$')
    for line in metrics_text.splitlines():
        m = pattern.match(line)
        if m:
            values[(m.group(1), m.group(2))] = float(m.group(3))
    apis = sorted(
        {api for name, api in values if name == "sluice_requests"},
        key=lambda a: -values.get(("sluice_request_bytes", a), 0),
    )
    return [
        (
            api,
            int(values.get(("sluice_requests", api), 0)),
            int(values.get(("sluice_request_bytes", api), 0)),
            int(values.get(("sluice_response_bytes", api), 0)),
        )
        for api in apis
    ]


def _print_traffic(table: list[tuple[str, int, int, int]]) -> None:
    print("\nWhat flowed through Sluice:")
    print(f"  {'API':<28}{'requests':>10}{'bytes in':>14}{'bytes out':>14}")
    for api, requests, bytes_in, bytes_out in table:
        print(f"  {api:<28}{requests:>10,}{bytes_in:>14,}{bytes_out:>14,}")


@dataclass
class ProducerSummary:
    client_id: str
    quota: int | None
    average: float  # payload bytes/s delivered from the warm-up to the end
    sent: int
    delivered: int
    told: list[int] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        return self.average / self.quota if self.quota else None


def summarize(producers: Sequence[DemoProducer], warm_up_s: int, seconds: int) -> list[ProducerSummary]:
    return [
        ProducerSummary(
            p.plan.client_id,
            p.plan.quota,
            p.average_rate(warm_up_s, seconds),
            p.sent,
            p.delivered,
            p.told(),
        )
        for p in producers
    ]


def _print_summary(rows: list[ProducerSummary], warm_up_s: int, seconds: int, sensor: str) -> None:
    print(f"\nSummary, seconds {warm_up_s}-{seconds} (after the warm-up):")
    header = (
        f"  {'client':<7}{'quota kB/s':>11}{'avg kB/s':>10}{'ratio':>8}{'sent':>8}{'delivered':>11}"
        f"{'throttled':>11}{'max told ms':>13}"
    )
    print(header)
    for row in rows:
        quota = _kbps(row.quota) if row.quota else "none"
        ratio = f"{row.ratio:.2f}x" if row.ratio is not None else "-"
        most = f"{max(row.told):,}" if row.told else "0"
        print(
            f"  {row.client_id:<7}{quota:>11}{_kbps(row.average):>10}{ratio:>8}{row.sent:>8,}"
            f"{row.delivered:>11,}{len(row.told):>11,}{most:>13}"
        )
    print(
        "  throttled / max told: responses with a throttle_time_ms, as the producer's throttle_cb saw them."
    )
    print("  Rates are record payload from the delivery reports. Sluice charges whole Produce requests")
    print("  (~1.2 % more per 10 kB record), so a producer held exactly at its quota shows ~0.99x here.")
    if sensor == "window":
        print("  With the window sensor a short span's average depends on where the comb's bursts fall")
        print("  (one every ~11 s); the long-run average is the quota: run longer (--seconds 120) to see it.")


def draw_chart(
    producers: Sequence[DemoProducer], seconds: int, warm_up_s: int, sensor: str, path: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"alpha": "tab:blue", "beta": "tab:orange", "gamma": "tab:green"}
    ceiling = 1.5 * max(max(p.plan.quota or 0, p.plan.pace or 0) for p in producers) / _ONE_KB
    fig, ax = plt.subplots(figsize=(10, 5.5), dpi=110)
    ax.axvspan(0, warm_up_s, color="0.93", zorder=0)
    ax.text(
        warm_up_s / 2,
        ceiling * 0.8,
        "warm-up: not in the averages"
        + ("\n(it holds the one burst\nthe token bucket allows)" if sensor == "token_bucket" else ""),
        ha="center",
        va="top",
        fontsize=8,
        color="0.4",
    )
    seconds_axis = [s + 0.5 for s in range(seconds)]
    for index, producer in enumerate(producers):
        plan = producer.plan
        colour = colours.get(plan.client_id)
        rates = [producer.rate(s) / _ONE_KB for s in range(seconds)]
        label = (
            f"{plan.client_id} (quota {_kbps(plan.quota)} kB/s)"
            if plan.quota
            else (f"{plan.client_id} (no quota; paces itself at {_kbps(plan.pace or 0)} kB/s)")
        )
        ax.plot(
            seconds_axis,
            [min(r, ceiling) for r in rates],
            marker="o",
            markersize=3,
            color=colour,
            label=label,
        )
        for x, rate in zip(seconds_axis, rates, strict=True):
            if rate > ceiling:
                # Off the scale (a burst): say how high, one label per producer so they do not overlap.
                near_end = x > seconds * 0.8
                ax.annotate(
                    f"↑ {plan.client_id} {rate:,.0f} kB/s",
                    (x, ceiling),
                    textcoords="offset points",
                    xytext=(-6 if near_end else 6, -12 * (1 + index)),
                    ha="right" if near_end else "left",
                    fontsize=8,
                    color=colour,
                )
        if plan.quota:
            ax.axhline(plan.quota / _ONE_KB, color=colour, linestyle="--", linewidth=1)
    ax.set_xlim(0, seconds)
    ax.set_ylim(0, ceiling)
    ax.set_xlabel("seconds since the producers started")
    ax.set_ylabel("delivered, kB/s (record payload)")
    ax.set_title(
        f"Sluice holds each producer at its producer_byte_rate ({sensor} sensor); dashed: quotas", fontsize=11
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.11), ncol=len(producers), fontsize=9, frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


SENSOR_SHAPES = {
    "token_bucket": "one burst of 11 s worth of quota, then a steady stream at the quota",
    "window": "Kafka's default: ~10 s worth of quota in one burst every ~11 s (the comb), exact on average",
}


def _header(seconds: int, sensor: str) -> None:
    print(
        f"Sluice demo ({seconds} s): is each producer held at its quota, and only those that have one?"
        " 10 kB records through Sluice:"
    )
    for p in PLANS:
        quota = f"producer_byte_rate {_kbps(p.quota)} kB/s" if p.quota else "no quota"
        pace = "sends flat out" if p.pace is None else f"paces itself at {_kbps(p.pace)} kB/s"
        print(f"  {p.client_id:<6} {quota:<32} {pace}")
    print(f"Sluice enforces the quotas with its {sensor} sensor: {SENSOR_SHAPES[sensor]}.")


def run_demo(seconds: int, chart: Path, sensor: str) -> int:
    _header(seconds, sensor)
    warm_up_s = min(MAX_WARM_UP_S, seconds * 2 // 5)
    topics = {plan.topic: PARTITIONS for plan in PLANS}
    entities = [{"client_id": p.client_id, "producer_byte_rate": p.quota} for p in PLANS if p.quota]
    print(f"\nStarting the test broker: librdkafka's mock cluster, 3 brokers, topics {', '.join(topics)}")
    with MockCluster(brokers=3, topics=topics) as cluster:
        print(f"  brokers at {cluster.bootstrap}")
        quota = {"sensor": sensor, "entities": entities}
        with ProxyProcess(cluster.bootstrap, extra_config={"quota": quota}) as proxy:
            print(f"Sluice listening on {proxy.bootstrap} (brokers on {proxy.broker_port_base}+node id)")
            producers = _run_producers(proxy.bootstrap, seconds)
            checked = [p for p in producers if p.plan.read_back]
            print(
                f"Reading {' and '.join(p.plan.client_id for p in checked)}'s records back through Sluice"
                " with a consumer group:"
            )
            read = _read_back(proxy.bootstrap, {p.plan.topic: p.sent for p in checked})
            table = _traffic_table(proxy.metrics_text())
            exit_code = proxy.stop()
    _print_traffic(table)
    rows = summarize(producers, warm_up_s, seconds)
    _print_summary(rows, warm_up_s, seconds, sensor)
    draw_chart(producers, seconds, warm_up_s, sensor, chart)

    checks: list[tuple[str, bool]] = []
    for p in checked:
        got = read[p.plan.topic]
        intact = len(got) == p.sent and order_free_digest(got) == order_free_digest(p.sent_hashes)
        checks.append(
            (f"every {p.plan.client_id} record came back byte for byte ({len(got):,} of {p.sent:,})", intact)
        )
    for p in producers:
        checks.append(
            (
                f"{p.plan.client_id}: all {p.sent:,} records delivered"
                + (f", errors: {'; '.join(p.errors[:3])}" if p.errors else ", no errors"),
                not p.errors and p.delivered == p.sent,
            )
        )
        if p.plan.quota:
            checks.append((f"{p.plan.client_id} was throttled and told so", bool(p.told())))
        else:
            checks.append((f"{p.plan.client_id} was never throttled", not p.told()))
    checks.append((f"Sluice stopped on SIGTERM with exit code {exit_code}", exit_code == 0))
    print()
    for text, ok in checks:
        print(f"  [{'ok' if ok else 'FAILED'}] {text}")
    print(f"\nChart of the per-second throughput: {chart}")
    return 0 if all(ok for _, ok in checks) else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="sluice demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=DEFAULT_SECONDS, help="how long the producers run")
    parser.add_argument("--chart", type=Path, default=DEFAULT_CHART, help="where to write the PNG chart")
    parser.add_argument(
        "--sensor",
        choices=SENSORS,
        default=SENSORS[0],
        help="quota sensor: Sluice's token_bucket (steady) or Kafka's sampled window (comb)",
    )
    args = parser.parse_args(argv)
    if args.seconds < 3:
        parser.error("--seconds must be at least 3")
    return run_demo(args.seconds, args.chart, args.sensor)


if __name__ == "__main__":
    sys.exit(main())
