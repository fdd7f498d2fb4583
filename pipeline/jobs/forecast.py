"""`sluice pipeline forecast`: the trend of the cluster's daily peak, and when it crosses a capacity.

The daily peak is the highest per-interval cluster rate of each UTC day (produce + fetch by default),
over complete days only (at least 90 % of the day's intervals present), so a half-recorded first or last
day does not bend the line. A least-squares line through the peaks gives the trend; its 95 % prediction
interval (Student's t with n-2 degrees of freedom) is the uncertainty of a future day's peak. The
crossing date is where the line reaches the capacity; "earliest" is where the interval's upper edge does,
"latest" where its lower edge does (absent when it does not within the horizon). A flat or falling trend
has no crossing, and says so.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from statistics import NormalDist

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..output.tables import job_dir, write_csv_rows
from ..progress import Progress
from .intervals import bucket_ms, cluster_intervals, entity_intervals

METRICS = ("total", "produce", "fetch")
MIN_DAYS = 3


@dataclass(frozen=True, slots=True)
class ForecastOptions:
    capacity: float | None = None  # bytes/s
    metric: str = "total"
    horizon_days: int = 3 * 365
    confidence: float = 0.95


@dataclass(frozen=True, slots=True)
class Trend:
    n: int
    intercept: float
    slope: float  # bytes/s per day
    residual_sd: float
    mean_x: float
    sxx: float
    r2: float

    def at(self, x: float) -> float:
        return self.intercept + self.slope * x

    def half_width(self, x: float, t: float) -> float:
        return t * self.residual_sd * math.sqrt(1 + 1 / self.n + (x - self.mean_x) ** 2 / self.sxx)


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile: exact for 1 and 2 degrees of freedom, Cornish-Fisher (4 terms) above.

    The expansion's error is below 0.2 % from 3 degrees of freedom up, well inside the interval's own
    uncertainty; no SciPy needed on the driver.
    """
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = NormalDist().inv_cdf(p)
    n = float(df)
    return (
        z
        + (z**3 + z) / (4 * n)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * n**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * n**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * n**4)
    )


def fit_trend(xs: list[float], ys: list[float]) -> Trend:
    n = len(xs)
    if n < MIN_DAYS:
        raise ValueError(f"a trend needs at least {MIN_DAYS} complete days of records, found {n}")
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = mean_y - slope * mean_x
    residuals = [y - (intercept + slope * x) for x, y in zip(xs, ys, strict=True)]
    sse = sum(r * r for r in residuals)
    syy = sum((y - mean_y) ** 2 for y in ys)
    return Trend(n, intercept, slope, math.sqrt(sse / (n - 2)), mean_x, sxx, 1 - sse / syy if syy else 1.0)


def crossing(trend: Trend, capacity: float, last_x: float, horizon: int, t: float) -> dict[str, float | None]:
    """Day indexes (from the first day) where the line, the upper and the lower edge reach `capacity`."""
    found: dict[str, float | None] = {"trend": None, "earliest": None, "latest": None}
    if trend.slope > 0:
        found["trend"] = max(last_x, (capacity - trend.intercept) / trend.slope)
    for day in range(int(last_x) + 1, int(last_x) + horizon + 1):
        upper = trend.at(day) + trend.half_width(day, t)
        lower = trend.at(day) - trend.half_width(day, t)
        if found["earliest"] is None and upper >= capacity:
            found["earliest"] = day
        if found["latest"] is None and lower >= capacity:
            found["latest"] = day
            break
    if found["trend"] is not None and found["trend"] > last_x + horizon:
        found["trend"] = None
    return found


def daily_peaks(usage: DataFrame, metric: str) -> list[tuple[datetime.date, float]]:
    if metric not in METRICS:
        raise ValueError(f"--metric must be one of {', '.join(METRICS)}")
    bucket = bucket_ms(usage)
    cluster = cluster_intervals(entity_intervals(usage, bucket), bucket)
    full = 0.9 * 86_400_000 / bucket
    rows = (
        cluster.groupBy(F.to_date("ts").alias("day"))
        .agg(F.max(f"{metric}_rate").alias("peak"), F.count(F.lit(1)).alias("intervals"))
        .where(F.col("intervals") >= full)
        .orderBy("day")
        .collect()
    )
    return [(row["day"], float(row["peak"])) for row in rows]


def run_forecast(
    spark: SparkSession,
    usage: DataFrame,
    out: str,
    options: ForecastOptions | None = None,
    progress: Progress | None = None,
) -> dict[str, str]:
    options = options or ForecastOptions()
    progress = progress or Progress(quiet=True)
    directory = job_dir(out, "forecast")
    with progress.step("forecast: daily peaks"):
        peaks = daily_peaks(usage, options.metric)
    xs = [float((day - peaks[0][0]).days) for day, _ in peaks]
    ys = [peak for _, peak in peaks]
    trend = fit_trend(xs, ys)  # refuses fewer than MIN_DAYS days
    first = peaks[0][0]
    t = t_quantile(0.5 + options.confidence / 2, trend.n - 2)
    rows = [
        {
            "day": day.isoformat(),
            "peak": y,
            "fitted": trend.at(x),
            "lower": trend.at(x) - trend.half_width(x, t),
            "upper": trend.at(x) + trend.half_width(x, t),
        }
        for (day, y), x in zip(peaks, xs, strict=True)
    ]
    written = {"daily_peaks": write_csv_rows(directory, "daily_peaks", list(rows[0]), rows)}
    last_x = xs[-1]
    found = crossing(trend, options.capacity, last_x, options.horizon_days, t) if options.capacity else {}
    end = max([last_x + 30] + [v for v in found.values() if v is not None])
    projection = [
        {
            "day": (first + datetime.timedelta(days=int(x))).isoformat(),
            "fitted": trend.at(x),
            "lower": trend.at(x) - trend.half_width(x, t),
            "upper": trend.at(x) + trend.half_width(x, t),
        }
        for x in range(int(last_x) + 1, math.ceil(end) + 8)
    ]
    written["projection"] = write_csv_rows(directory, "projection", list(projection[0]), projection)

    def date(x: float | None) -> str:
        return "" if x is None else (first + datetime.timedelta(days=math.ceil(x))).isoformat()

    summary = {
        "metric": options.metric,
        "days": trend.n,
        "first_day": first.isoformat(),
        "last_day": peaks[-1][0].isoformat(),
        "slope_per_day": trend.slope,
        "intercept": trend.intercept,
        "r2": trend.r2,
        "residual_sd": trend.residual_sd,
        "confidence": options.confidence,
        "capacity": options.capacity or "",
        "crossing": date(found.get("trend")),
        "earliest": date(found.get("earliest")),
        "latest": date(found.get("latest")),
        "status": _status(trend, options, found, last_x),
    }
    written["forecast"] = write_csv_rows(directory, "forecast", list(summary), [summary])
    return written


def _status(trend: Trend, options: ForecastOptions, found: dict[str, float | None], last_x: float) -> str:
    if not options.capacity:
        return "no capacity given: trend only"
    if trend.at(last_x) >= options.capacity:
        return "the peak is already at or above the capacity"
    if trend.slope <= 0:
        return "the daily peak is not growing: no crossing"
    if found.get("trend") is None:
        return f"no crossing within {options.horizon_days} days"
    return "crossing forecast"
