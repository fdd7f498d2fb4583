"""The demo's chart: every label on it can be read (no text drawn over another)."""

from __future__ import annotations

import itertools
import time

import matplotlib
import matplotlib.pyplot as plt

from sluice.proxy.tools import demo
from sluice.proxy.tools.demo_chart import chart_figure
from sluice.proxy.tools.demo_clients import CountingClient

matplotlib.use("Agg")
SECONDS = 30


def client(label: str, kb_per_second: list[float]) -> CountingClient:
    plan = next(p for p in demo.plans("token_bucket") if p.label == label)
    counted = CountingClient(plan, time.monotonic())
    counted.bytes_by_second = {second: int(kb * 1000) for second, kb in enumerate(kb_per_second)}
    return counted


def first_burst(burst_kb: float, held_kb: float) -> list[float]:
    return [burst_kb] + [held_kb] * (SECONDS - 1)


def test_no_label_is_drawn_over_another() -> None:
    # A run's shape: each quota client's first second far above the scale, alpha and beta in the same
    # second; the window sensor's comb; two clients with the same quota in one panel.
    alpha = client("alpha", first_burst(1100, 100))
    comb = [1100, 20, *[10] * 10, 1010, *[10] * 10, 950, *[10] * (SECONDS - 24)]
    panels = {
        "held": [alpha, client("beta", first_burst(2380, 250)), client("gamma", [500] * SECONDS)],
        "sensors": [alpha, client("alpha/window", comb)],
        "consumer": [client("reader", first_burst(1980, 150))],
        "flat_out": [client("delta", [130_000] * SECONDS)],
    }
    fig = chart_figure(panels, SECONDS, 12, 3, ("token_bucket", "window"))
    try:
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            texts = [t for t in ax.texts if t.get_text()]
            assert texts or ax is fig.axes[-1]
            boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
            for (one, a), (other, b) in itertools.combinations(boxes, 2):
                assert not a.overlaps(b), f"{one!r} is drawn over {other!r} in {ax.get_title()!r}"
            # The two clients with the same quota share one per-broker line and its one label.
            labels = [t for t, _ in boxes if "per broker" in t]
            assert len(labels) == len(set(labels)), labels
    finally:
        plt.close(fig)
