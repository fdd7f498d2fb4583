"""What the demo prints: a line per second for every client, the traffic Sluice relayed, the summary table and
the per-broker arithmetic."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from .demo_clients import CountingClient, DemoConsumer, DemoProducer

_ONE_KB = 1000  # rates are shown in kB/s, as quotas are usually written (100000 = 100 kB/s)


def kbps(rate: float) -> str:
    return f"{rate / _ONE_KB:,.1f}"


def _cell(client: CountingClient, second: int) -> str:
    rate = client.rate(second)
    text = f"{rate / 1e6:,.1f}M" if rate >= 1e6 else kbps(rate)
    return text + ("*" if client.told(second) else " ")


def print_live(clients: Sequence[CountingClient], started: float, seconds: int) -> None:
    """One line per second: what each client got, in kB/s (M: MB/s); * = it was told a throttle."""
    width = max(11, *(len(c.plan.label) + 1 for c in clients))
    print("\n  kB/s delivered (producers) or received (consumer) per second; * = told a throttle that second")
    print("  " + f"{'second':<9}" + "".join(f"{c.plan.label:>{width}}" for c in clients))
    for second in range(seconds):
        # Wait a little past the second's end: delivery reports are served by polls every <= 50 ms.
        time.sleep(max(0.0, started + second + 1.1 - time.monotonic()))
        stamp = f"{second:>3}-{second + 1:>2} s"
        print("  " + stamp + "".join(f"{_cell(c, second):>{width}}" for c in clients), flush=True)


def traffic_table(metrics_text: str) -> list[tuple[str, int, int, int]]:
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


def print_traffic(table: list[tuple[str, int, int, int]]) -> None:
    print("\nWhat flowed through the main Sluice:")
    print(f"  {'API':<28}{'requests':>10}{'bytes in':>14}{'bytes out':>14}")
    for api, requests, bytes_in, bytes_out in table:
        print(f"  {api:<28}{requests:>10,}{bytes_in:>14,}{bytes_out:>14,}")


@dataclass
class Summary:
    label: str
    sensor: str  # the sensor of the Sluice it went through
    quota: int | None
    average: float  # payload bytes/s from the warm-up to the end
    count: int  # records sent (producer) or received (consumer)
    done: int  # records delivered (producer) or received (consumer)
    told: list[int] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        return self.average / self.quota if self.quota else None


def summarize(
    clients: Sequence[CountingClient], sensors: dict[str, str], warm_up_s: int, seconds: int
) -> list[Summary]:
    rows = []
    for c in clients:
        if isinstance(c, DemoProducer):
            count, done = c.sent, c.delivered
        else:
            assert isinstance(c, DemoConsumer)
            count = done = c.received
        average = c.average_rate(warm_up_s, seconds)
        rows.append(
            Summary(c.plan.label, sensors[c.plan.route], c.plan.quota, average, count, done, c.told())
        )
    return rows


def print_summary(rows: list[Summary], warm_up_s: int, seconds: int) -> None:
    print(f"\nSummary, seconds {warm_up_s}-{seconds} (after the warm-up):")
    print(
        f"  {'client':<13}{'sensor':>13}{'quota kB/s':>11}{'avg kB/s':>11}{'ratio':>8}{'records':>9}"
        f"{'done':>9}{'throttled':>10}{'max told ms':>12}"
    )
    for row in rows:
        quota = kbps(row.quota) if row.quota else "none"
        ratio = f"{row.ratio:.2f}x" if row.ratio is not None else "-"
        most = f"{max(row.told):,}" if row.told else "0"
        print(
            f"  {row.label:<13}{row.sensor:>13}{quota:>11}{kbps(row.average):>11}{ratio:>8}{row.count:>9,}"
            f"{row.done:>9,}{len(row.told):>10,}{most:>12}"
        )
    print("  records / done: produced / delivered, or, for the consumer, received / received.")
    print("  throttled / max told: responses with a throttle_time_ms, as the client's throttle_cb saw them.")
    print("  Rates are record payload as the clients saw it. Sluice charges whole requests and responses")
    print("  (~1-2 % more for 10 kB records), so a client held exactly at its quota shows ~0.98x here.")
    print(
        "  The window sensor lets ~10 s worth through in one burst every ~11 s (the comb): over a short span"
    )
    print("  its average depends on where the bursts fall; run longer (--seconds 120) to see it converge.")


def print_per_broker(rows: list[Summary], leaders: dict[str, int], brokers: int) -> None:
    """Kafka's arithmetic for the same quotas enforced per broker, as computed figures."""
    print(
        f"\nThe same quotas on a cluster of {brokers} brokers that enforces each one per broker, as Kafka"
        " does (computed with Kafka's arithmetic, not measured): each broker allows the full quota, so a"
        " client may get quota x the number of brokers leading its partitions."
    )
    for row in rows:
        if row.quota and row.label in leaders:
            n = leaders[row.label]
            print(
                f"  {row.label:<13} {n} brokers lead its partitions: up to {n} x {kbps(row.quota)} ="
                f" {kbps(n * row.quota)} kB/s there; Sluice: {kbps(row.quota)} kB/s for the whole cluster."
            )
