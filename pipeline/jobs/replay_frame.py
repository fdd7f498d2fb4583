"""The replay as Spark runs it: one pandas frame per sensor group in, hourly rows and throttles out.

Runs on the executors. The candidate quotas travel as the raw YAML mapping and are parsed again there by
Sluice's own parser (the parsed settings hold read-only mappings, which do not pickle).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from sluice.config.quota_section import parse_quota_section
from sluice.config.quota_settings import QuotaSettings

from .replay import ADMITTED, DELAYED, THROTTLE_COUNT, THROTTLE_MS, THROTTLED_S, ReplayOptions, replay_group
from .replay_series import spread_per_second

if TYPE_CHECKING:  # pandas is imported on Spark's Python workers, where the replay runs
    import pandas as pd

REPLAY_SCHEMA = (
    "group string, user string, client_id string, direction string, kind string, at_ms bigint, "
    "demand bigint, admitted bigint, delayed bigint, throttle_ms bigint, throttle_count bigint, "
    "throttled_seconds bigint, limited boolean, bound double, sensor string, max_backlog bigint, "
    "max_delay_ms bigint, backlog_end bigint, group_seconds bigint, group_skipped bigint"
)
COLUMNS = [part.split()[0] for part in REPLAY_SCHEMA.split(", ")]

_settings_cache: dict[str, QuotaSettings] = {}


def _settings(raw: Mapping[object, object]) -> QuotaSettings:
    key = json.dumps(raw, sort_keys=True, default=str)
    if key not in _settings_cache:
        _settings_cache[key] = parse_quota_section(raw, "quota")
    return _settings_cache[key]


def replay_function(
    raw_quotas: Mapping[object, object], bucket_ms: int, options: ReplayOptions, span_ms: tuple[int, int]
) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """The function for `applyInPandas`. Every group is replayed over the whole input's span
    [first bucket, last bucket end), so a throttle given near a group's last record still runs its course
    until the data ends, as it would for any other group."""
    seconds = bucket_ms // 1000
    start_s = span_ms[0] // 1000
    length = (span_ms[1] - span_ms[0]) // 1000

    def replay(frame: pd.DataFrame) -> pd.DataFrame:
        import pandas as pd

        settings = _settings(raw_quotas)
        group = str(frame["group"].iloc[0])
        first_s = frame["bucket_ms"].to_numpy(dtype=np.int64) // 1000
        client = frame["client_id"].astype(object).where(frame["client_id"].notna(), None)
        keys = list(zip(frame["user"], client, strict=True))
        entities = sorted(set(keys), key=lambda e: (e[0], e[1] is not None, e[1] or ""))
        produce, fetch = [], []
        index = {entity: i for i, entity in enumerate(entities)}
        rows_of = np.array([index[k] for k in keys], dtype=np.int64)
        for i in range(len(entities)):
            mine = rows_of == i
            produce.append(
                spread_per_second(
                    start_s, length, first_s[mine], seconds, frame["produce_bytes"].to_numpy()[mine]
                )
            )
            fetch.append(
                spread_per_second(
                    start_s, length, first_s[mine], seconds, frame["fetch_bytes"].to_numpy()[mine]
                )
            )
        results, stats = replay_group(entities, start_s, produce, fetch, settings, options)
        out = []
        for (user, client_id), per_direction in zip(entities, results, strict=True):
            for direction, result in per_direction.items():
                common = dict(
                    group=group,
                    user=user,
                    client_id=client_id,
                    direction=direction,
                    limited=result.limited,
                    bound=result.bound,
                    sensor=result.sensor,
                    max_backlog=result.max_backlog_bytes,
                    max_delay_ms=result.max_delay_ms,
                    backlog_end=result.backlog_end_bytes,
                    group_seconds=stats.seconds,
                    group_skipped=stats.skipped_seconds,
                )
                for hour in sorted(set(result.hours) | set(result.demand_hours)):
                    counters = result.hours.get(hour, [0, 0, 0, 0, 0])
                    out.append(
                        {
                            **common,
                            "kind": "hour",
                            "at_ms": hour * 3_600_000,
                            "demand": result.demand_hours.get(hour, 0),
                            "admitted": counters[ADMITTED],
                            "delayed": counters[DELAYED],
                            "throttle_ms": counters[THROTTLE_MS],
                            "throttle_count": counters[THROTTLE_COUNT],
                            "throttled_seconds": counters[THROTTLED_S],
                        }
                    )
                for at, throttle in result.events:
                    out.append(
                        {
                            **common,
                            "kind": "event",
                            "at_ms": at,
                            "demand": 0,
                            "admitted": 0,
                            "delayed": 0,
                            "throttle_ms": throttle,
                            "throttle_count": 1,
                            "throttled_seconds": 0,
                        }
                    )
        return pd.DataFrame(out, columns=COLUMNS)

    return replay
