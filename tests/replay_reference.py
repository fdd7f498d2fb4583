"""The what-if replay model, written out plainly for the tests: every second stepped, no shortcuts.

This is the model docs/pipeline.md describes, in as few lines as it takes, calling the quota managers
directly. `sluice.pipeline.jobs.replay` must give exactly these throttles (its skips are optimisations).
"""

from __future__ import annotations

from sluice.config.quota_settings import FetchThrottle, QuotaSettings, ThrottleMode
from sluice.quota.throttle import saturating_int32


def reference_replay(
    entities,
    start_s,
    produce,
    fetch,
    settings: QuotaSettings,
    request_bytes=1_048_576,
    fetch_max_bytes=52_428_800,
):
    """{(user, client_id, direction): [(at_ms, throttle_ms), ...]} for the limited connections."""
    managers = settings.new_managers()
    retry = (
        settings.fetch_throttle is FetchThrottle.EMPTY and settings.throttle_mode is not ThrottleMode.DELAY
    )
    conns = []
    for j, (user, client_id) in enumerate(entities):
        for direction, manager, demand in (
            ("produce", managers.produce, produce[j]),
            ("fetch", managers.fetch, fetch[j]),
        ):
            if not manager.quotas_enabled or manager.resolve(user, client_id).rule is None:
                continue
            if direction == "produce":
                cap = request_bytes
            else:
                cap = min(
                    fetch_max_bytes, saturating_int32(manager.max_value_in_quota_window(user, client_id))
                )
            conns.append(
                {
                    "key": (user, client_id, direction),
                    "manager": manager,
                    "demand": demand,
                    "cap": max(1, cap),
                    "pending": 0,
                    "muted_until": -1,
                    "events": [],
                }
            )
    mute_ends: list[tuple[int, int]] = []

    def send(index: int, now: int) -> None:
        c = conns[index]
        user, client_id, direction = c["key"]
        while c["pending"]:
            chunk = min(c["pending"], c["cap"])
            throttle = c["manager"].record_and_get_throttle_ms(user, client_id, chunk, now)
            if throttle > 0 and direction == "fetch" and retry:
                c["manager"].unrecord(user, client_id, chunk, now)
            else:
                c["pending"] -= chunk
            if throttle > 0:
                c["events"].append((now, throttle))
                c["muted_until"] = now + throttle
                mute_ends.append((now + throttle, index))
                return

    def due_before(t: int) -> None:
        while True:
            due = sorted(m for m in mute_ends if m[0] < t)
            if not due:
                return
            mute_ends.remove(due[0])
            at, index = due[0]
            if conns[index]["muted_until"] == at and conns[index]["pending"]:
                send(index, at)

    n = len(produce[0])
    for s in range(n):
        now = (start_s + s) * 1000
        due_before(now)
        for c in conns:
            c["pending"] += int(c["demand"][s])
        for index, c in enumerate(conns):
            if c["pending"] and c["muted_until"] <= now:
                send(index, now)
    due_before((start_s + n) * 1000)
    return {c["key"]: c["events"] for c in conns}
