"""The demo's chart: four panels of per-second rates, measured at the clients.

* producers through the main Sluice, each against its quota (dashed) and, dotted, what the same quota would
  let through on a cluster of the same size that enforces it per broker (computed with Kafka's arithmetic);
* the same quota on the two sensors side by side: the window sensor's comb, the token bucket's flat line;
* the consumer under its consumer_byte_rate;
* the producer with no quota, sending flat out (in MB/s: it is far off the other panels' scale).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .demo_clients import CountingClient

_ONE_KB = 1000
COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")
WHERE_MEASURED = (
    "Rates are record payload per second as the clients saw it: the producers' delivery reports and the "
    "records the consumer received (Sluice charges whole requests, ~1 % more)."
)


# Text over a line stays readable.
_NOTE_BOX = {"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1}


def _kb(values: Sequence[float]) -> list[float]:
    return [v / _ONE_KB for v in values]


def _panel(
    ax: Any,
    clients: Sequence[CountingClient],
    seconds: int,
    warm_up_s: int,
    brokers: int,
    title: str,
    label_of: Any,
) -> None:
    axis = [s + 0.5 for s in range(seconds)]
    ceiling = 0.0
    per_broker: dict[int, str] = {}  # quota -> the colour of its dotted line (grey when clients share it)
    for index, client in enumerate(clients):
        colour = COLOURS[index % len(COLOURS)]
        rates = _kb([client.rate(s) for s in range(seconds)])
        quota = client.plan.quota
        # Head room above the per-broker line, for its label and the off-scale notes in the top band.
        top = 3.6 * quota / _ONE_KB if quota else max(rates, default=0) * 1.2
        ceiling = max(ceiling, top)
        ax.plot(axis, rates, marker="o", markersize=2.5, color=colour, label=label_of(client))
        if quota:
            ax.axhline(quota / _ONE_KB, color=colour, linestyle="--", linewidth=1)
            per_broker[quota] = "0.4" if quota in per_broker else colour
    for quota, colour in per_broker.items():
        ax.axhline(brokers * quota / _ONE_KB, color=colour, linestyle=":", linewidth=1.2)
        # At the right end: the off-scale notes of the first burst sit at the top left.
        ax.text(
            seconds - 0.3,
            brokers * quota / _ONE_KB,
            f"{brokers} x {quota / _ONE_KB:,.0f} kB/s: the same quota per broker (computed)",
            ha="right",
            va="bottom",
            fontsize=7,
            color=colour,
            bbox=_NOTE_BOX,
        )
    ceiling = ceiling or 1.0
    _off_scale_notes(ax, clients, axis, ceiling)
    ax.axvspan(0, warm_up_s, color="0.93", zorder=0)
    ax.set_xlim(0, seconds)
    ax.set_ylim(0, ceiling)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("seconds since the clients started (grey: warm-up, left out of the averages)", fontsize=8)
    ax.set_ylabel("kB/s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center right")


def _off_scale_notes(
    ax: Any, clients: Sequence[CountingClient], axis: Sequence[float], ceiling: float
) -> None:
    """Say how high a second went instead of squashing the scale: one note per second, every client that
    passed the top in it on its own line (the first burst of two producers falls in the same second)."""
    notes: dict[float, list[str]] = {}
    for client in clients:
        for x, rate in zip(axis, _kb([client.rate(int(x)) for x in axis]), strict=True):
            if rate > ceiling:
                notes.setdefault(x, []).append(f"{client.plan.label} ↑ {rate:,.0f}")
    for x, lines in notes.items():
        ax.annotate(
            "\n".join(lines),
            (x, ceiling),
            xytext=(3, -3),
            textcoords="offset points",
            fontsize=7,
            va="top",
            bbox=_NOTE_BOX,
        )


def draw_chart(
    panels: Mapping[str, Sequence[CountingClient]],
    seconds: int,
    warm_up_s: int,
    brokers: int,
    sensors: tuple[str, str],
    path: Path,
) -> None:
    """`panels`: "held" (main Sluice's producers with quotas and the paced one), "sensors" (the same quota
    on both sensors), "consumer", "flat_out" (no quota)."""
    import matplotlib.pyplot as plt

    fig = chart_figure(panels, seconds, warm_up_s, brokers, sensors)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def chart_figure(
    panels: Mapping[str, Sequence[CountingClient]],
    seconds: int,
    warm_up_s: int,
    brokers: int,
    sensors: tuple[str, str],
) -> Any:
    """The chart as a matplotlib figure (the caller saves and closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    main_sensor, other_sensor = sensors
    fig, axes = plt.subplots(2, 2, figsize=(14, 9), dpi=100)

    def producer_label(client: CountingClient) -> str:
        plan = client.plan
        if plan.quota:
            return f"{plan.label}: producer_byte_rate {plan.quota / _ONE_KB:,.0f} kB/s"
        return f"{plan.label}: no quota, paces itself at {(plan.pace or 0) / _ONE_KB:,.0f} kB/s"

    _panel(
        axes[0][0],
        panels["held"],
        seconds,
        warm_up_s,
        brokers,
        f"Producers through Sluice ({main_sensor} sensor): dashed = quota, one for the whole cluster",
        producer_label,
    )
    _panel(
        axes[0][1],
        panels["sensors"],
        seconds,
        warm_up_s,
        brokers,
        f"The same quota, two sensors: {other_sensor} vs {main_sensor}",
        lambda c: f"{c.plan.label} ({main_sensor if c.plan.route == 'main' else other_sensor} sensor)",
    )
    _panel(
        axes[1][0],
        panels["consumer"],
        seconds,
        warm_up_s,
        brokers,
        f"A consumer through Sluice ({main_sensor} sensor): dashed = consumer_byte_rate",
        lambda c: f"{c.plan.label}: consumer_byte_rate {(c.plan.quota or 0) / _ONE_KB:,.0f} kB/s",
    )
    flat = axes[1][1]
    axis = [s + 0.5 for s in range(seconds)]
    for index, client in enumerate(panels["flat_out"]):
        rates = [client.rate(s) / 1e6 for s in range(seconds)]
        flat.plot(axis, rates, marker="o", markersize=2.5, color=COLOURS[-1 - index], label=client.plan.label)
    flat.set_xlim(0, seconds)
    flat.set_ylim(bottom=0)
    flat.set_title("No quota, sending flat out: untouched (note the MB/s scale)", fontsize=10)
    flat.set_xlabel("seconds since the clients started", fontsize=8)
    flat.set_ylabel("MB/s")
    flat.grid(alpha=0.3)
    flat.legend(fontsize=8, loc="upper right")
    fig.suptitle(
        "Sluice holds each client to its quota over the whole cluster; dotted: what the same quota would let "
        f"through on {brokers} brokers enforcing it each (Kafka's arithmetic, computed)\n{WHERE_MEASURED}",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig
