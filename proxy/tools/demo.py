"""`sluice demo`: Sluice holding real clients to their quotas in front of a local test broker.

librdkafka's mock cluster (3 brokers) runs as a child process and two Sluice processes in front of it: the
main one with the chosen sensor (`--sensor`, default token_bucket) and a second one with the other sensor.
Through the main Sluice, confluent-kafka clients with 10 kB records:

* alpha (producer_byte_rate 100 kB/s) and beta (250 kB/s) send flat out and are held at their quotas;
* gamma has no quota and paces itself at 500 kB/s: untouched;
* delta has no quota and sends flat out: untouched, as fast as the machine goes;
* reader, a consumer (consumer_byte_rate 150 kB/s), reads a topic filled beforehand.

Through the second Sluice, alpha's twin sends flat out under the same 100 kB/s quota, so the window
sensor's comb and the token bucket's flat line show side by side. Every second the demo prints what each
client got; at the end it reads alpha's and beta's records back (count and checksum), prints the traffic
the main Sluice relayed, a summary, what the same quotas would allow on a cluster enforcing them per broker
(Kafka's arithmetic, computed), and draws a PNG chart. Rates are measured at the clients (delivery reports,
records received). The main Sluice publishes usage records, saved at the end as JSON lines (`--usage-out`)
for `sluice pipeline demo --input` (`make demo-pipeline`). Everything runs on 127.0.0.1 and stops by
itself; the exit code is 0 only if every check passed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .demo_chart import draw_chart
from .demo_clients import (
    ClientPlan,
    CountingClient,
    DemoConsumer,
    DemoProducer,
    fill_topic,
    order_free_digest,
    read_back,
)
from .demo_processes import MockClusterChild, SluiceChild
from .demo_report import (
    kbps,
    print_live,
    print_per_broker,
    print_summary,
    print_traffic,
    summarize,
    traffic_table,
)
from .demo_usage import SavedUsage, save_usage_topic

PARTITIONS = 6
BROKERS = 3
DEFAULT_SECONDS = 30
DEFAULT_CHART = Path("out") / "demo-throughput.png"
DEFAULT_USAGE_OUT = Path("out") / "demo-usage.jsonl"
USAGE_INTERVAL_MS = 1000
# The token bucket's one burst (N x W x quota, 11 s worth) drains in the first second or two; the window
# sensor's comb repeats every ~11 s, so with it no warm-up makes a short run's average exact.
MAX_WARM_UP_S = 12
SENSORS = ("token_bucket", "window")
HISTORY_TOPIC = "demo-history"
MAX_HISTORY_BYTES = 25_000_000  # the mock keeps ~5 MB per partition


def other_sensor(sensor: str) -> str:
    return SENSORS[1 - SENSORS.index(sensor)]


def plans(sensor: str) -> tuple[ClientPlan, ...]:
    twin = "alpha/" + ("bucket" if other_sensor(sensor) == "token_bucket" else "window")
    return (
        ClientPlan("alpha", "alpha", 100_000, read_back=True),
        ClientPlan("beta", "beta", 250_000, read_back=True),
        ClientPlan("gamma", "gamma", None, pace=500_000),
        ClientPlan("delta", "delta", None),
        ClientPlan(twin, "alpha", 100_000, route="other", topic_name="demo-alpha-twin"),
        ClientPlan("reader", "reader", 150_000, consumer=True, topic_name=HISTORY_TOPIC),
    )


def _quota_entities(client_plans: Sequence[ClientPlan], route: str) -> list[dict[str, object]]:
    key = {False: "producer_byte_rate", True: "consumer_byte_rate"}
    return [
        {"client_id": p.client_id, key[p.consumer]: p.quota}
        for p in client_plans
        if p.quota and p.route == route
    ]


def _consumer_config() -> dict[str, int]:
    # Small fetches, so each response earns a short throttle and the consumer's line is steady.
    return {"fetch.max.bytes": 65536, "message.max.bytes": 65536, "max.partition.fetch.bytes": 16384}


def _start(client_plans: Sequence[ClientPlan], bootstraps: dict[str, str]) -> list[CountingClient]:
    started = time.monotonic()
    clients: list[CountingClient] = []
    for plan in client_plans:
        if plan.consumer:
            consumer = DemoConsumer(bootstraps[plan.route], plan, started, _consumer_config())
            clients.append(consumer)
        else:
            clients.append(DemoProducer(bootstraps[plan.route], plan, started))
    for client in clients:
        client.start()
    return clients


def _finish(clients: Sequence[CountingClient]) -> None:
    print("  stopping the clients; the producers flush what they still hold ...")
    for client in clients:
        client.stop()
    for client in clients:
        client.finish()


def _leaders(bootstrap: str, client_plans: Sequence[ClientPlan]) -> dict[str, int]:
    """How many brokers lead each client's topic's partitions (Kafka's per-broker arithmetic uses it)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "demo-metadata"})
    metadata = producer.list_topics(timeout=10)
    return {
        p.label: len({part.leader for part in metadata.topics[p.topic].partitions.values()})
        for p in client_plans
        if p.topic in metadata.topics
    }


def _header(seconds: int, sensor: str, client_plans: Sequence[ClientPlan]) -> None:
    print(f"Sluice demo ({seconds} s): is each client held at its quota, and only those that have one?")
    for p in client_plans:
        quota = (
            f"{'consumer' if p.consumer else 'producer'}_byte_rate {kbps(p.quota)} kB/s"
            if p.quota
            else "no quota"
        )
        does = "reads a topic filled beforehand" if p.consumer else "sends flat out"
        if p.pace:
            does = f"paces itself at {kbps(p.pace)} kB/s"
        where = f"main Sluice ({sensor})" if p.route == "main" else f"second Sluice ({other_sensor(sensor)})"
        print(f"  {p.label:<13} {quota:<33} {does:<32} through the {where}")


def run_demo(
    seconds: int, chart: Path, sensor: str, usage_out: Path = DEFAULT_USAGE_OUT, verbose: bool = False
) -> int:
    client_plans = plans(sensor)
    _header(seconds, sensor, client_plans)
    warm_up_s = min(MAX_WARM_UP_S, seconds * 2 // 5)
    topics = {p.topic: PARTITIONS for p in client_plans}
    sensors = {"main": sensor, "other": other_sensor(sensor)}
    print(f"\nStarting the test broker: librdkafka's mock cluster, {BROKERS} brokers, topics:")
    print(f"  {', '.join(topics)}")
    # The test broker's own lines (librdkafka's "Mock cluster enabled" notice, its start and stop) go to a
    # file beside the chart unless asked for: they say nothing about quotas.
    broker_log = None if verbose else chart.parent / "demo-broker.log"
    if broker_log is not None:
        broker_log.parent.mkdir(parents=True, exist_ok=True)
        broker_log.write_bytes(b"")
    with MockClusterChild(brokers=BROKERS, topics=topics, log_path=broker_log) as cluster:
        reader = next(p for p in client_plans if p.consumer)
        history = min(MAX_HISTORY_BYTES, int((reader.quota or 0) * (seconds * 1.5 + 11)))
        filled = fill_topic(cluster.bootstrap, reader.topic, history)
        print(
            f"  brokers at {cluster.bootstrap}; {filled:,} records written to {reader.topic} for the consumer"
        )
        proxies = {
            route: SluiceChild(
                cluster.bootstrap,
                extra_config={
                    "quota": {"sensor": sensors[route], "entities": _quota_entities(client_plans, route)},
                    # The main Sluice's usage records feed `make demo-pipeline`.
                    "usage": {"enabled": route == "main", "interval_ms": USAGE_INTERVAL_MS},
                },
            )
            for route in ("main", "other")
        }
        try:
            for route, proxy in proxies.items():
                print(f"Sluice ({route}, {sensors[route]} sensor) listening on {proxy.bootstrap}")
            bootstraps = {route: proxy.bootstrap for route, proxy in proxies.items()}
            clients = _start(client_plans, bootstraps)
            try:
                print_live(clients, clients[0].started, seconds)
            finally:
                _finish(clients)
            checked = [c for c in clients if isinstance(c, DemoProducer) and c.plan.read_back]
            print(f"Reading {' and '.join(c.plan.label for c in checked)}'s records back through Sluice:")
            read = read_back(bootstraps["main"], {c.plan.topic: c.sent for c in checked})
            table = traffic_table(proxies["main"].metrics_text())
            leaders = _leaders(bootstraps["main"], client_plans)
        finally:
            exit_codes = {route: proxy.stop() for route, proxy in proxies.items()}
            for proxy in proxies.values():
                proxy.close()
        usage = save_usage_topic(cluster.bootstrap, usage_out)
    print_traffic(table)
    rows = summarize(clients, sensors, warm_up_s, seconds)
    print_summary(rows, warm_up_s, seconds)
    print_per_broker(rows, leaders, BROKERS)
    panels = {
        "held": [
            c for c in clients if c.plan.route == "main" and not c.plan.consumer and c.plan.label != "delta"
        ],
        "sensors": [c for c in clients if c.plan.client_id == "alpha"],
        "consumer": [c for c in clients if c.plan.consumer],
        "flat_out": [c for c in clients if c.plan.label == "delta"],
    }
    draw_chart(panels, seconds, warm_up_s, BROKERS, (sensor, sensors["other"]), chart)
    return _report_checks(clients, read, exit_codes, chart, (usage, usage_out), filled)


def _report_checks(
    clients: Sequence[CountingClient],
    read: dict[str, list[bytes]],
    exit_codes: dict[str, int],
    chart: Path,
    saved: tuple[SavedUsage, Path],
    history_records: int,
) -> int:
    checks: list[tuple[str, bool]] = []
    for c in clients:
        if isinstance(c, DemoProducer) and c.plan.read_back:
            got = read[c.plan.topic]
            intact = len(got) == c.sent and order_free_digest(got) == order_free_digest(c.sent_hashes)
            checks.append(
                (f"every {c.plan.label} record came back byte for byte ({len(got):,} of {c.sent:,})", intact)
            )
        if isinstance(c, DemoProducer):
            errors = f", errors: {'; '.join(c.errors[:3])}" if c.errors else ", no errors"
            checks.append(
                (
                    f"{c.plan.label}: all {c.sent:,} records delivered{errors}",
                    not c.errors and c.delivered == c.sent,
                )
            )
        else:
            received = getattr(c, "received", 0)
            # Records left unread at the end: the consumer's rate was the quota's doing, not the data's end.
            checks.append(
                (
                    f"{c.plan.label}: received {received:,} of {history_records:,} records, never ran out",
                    not c.errors and 0 < received < history_records,
                )
            )
        if c.plan.quota:
            checks.append((f"{c.plan.label} was throttled and told so", bool(c.told())))
        else:
            checks.append((f"{c.plan.label} was never throttled", not c.told()))
    for route, code in exit_codes.items():
        checks.append((f"the {route} Sluice stopped on SIGTERM with exit code {code}", code == 0))
    usage, usage_out = saved
    main_producers = {
        c.plan.client_id for c in clients if isinstance(c, DemoProducer) and c.plan.route == "main"
    }
    checks.append(
        (
            f"usage records: {usage.messages:,} messages, {usage.rows:,} rows, every producer of the main "
            f"Sluice in them",
            usage.messages > 0 and all(usage.produce_bytes.get(c, 0) > 0 for c in main_producers),
        )
    )
    print()
    for text, ok in checks:
        print(f"  [{'ok' if ok else 'FAILED'}] {text}")
    print(f"\nChart of the per-second rates: {chart}")
    print(f"Usage records of the main Sluice: {usage_out} (`sluice pipeline demo --input {usage_out}`)")
    return 0 if all(ok for _, ok in checks) else 1


def _seconds(text: str) -> int:
    value = int(text)
    if value < 3:
        raise argparse.ArgumentTypeError("must be at least 3")
    return value


DESCRIPTION = __doc__


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=_seconds, default=DEFAULT_SECONDS, help="how long the clients run")
    parser.add_argument("--chart", type=Path, default=DEFAULT_CHART, help="where to write the PNG chart")
    parser.add_argument(
        "--usage-out",
        type=Path,
        default=DEFAULT_USAGE_OUT,
        help="where to save the main Sluice's usage records (JSON lines) for `sluice pipeline demo --input`",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="the test broker's own log lines too (default: in demo-broker.log)",
    )
    parser.add_argument(
        "--sensor",
        choices=SENSORS,
        default=SENSORS[0],
        help="the main Sluice's quota sensor: token_bucket (steady) or Kafka's sampled window (comb); the "
        "second Sluice uses the other",
    )


def run(args: argparse.Namespace) -> int:
    return run_demo(args.seconds, args.chart, args.sensor, args.usage_out, args.verbose)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="sluice demo", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
