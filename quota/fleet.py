"""One quota for a fleet: charge what other Sluice instances admitted into this instance's sensors.

Every instance publishes its usage once per interval (``quota/usage_ledger.py``) and reads everyone
else's. :class:`FleetQuotas` charges another instance's batch into the sensors of the same entities here,
*recorded, not throttled on*: the charge never throttles anyone by itself, it weighs on this instance's
own clients at their next request, exactly like Kafka's unchecked records (spec 2.6).

Other instances' usage arrives late: up to one publish interval plus the delivery time (D). A sampled
window lets a flat-out client through in bursts as large as the headroom it sees (the comb of
docs/quotas.md); with D of delay, every instance would spend the same headroom before hearing of the
others. So each sampled-window sensor also keeps a :class:`PeerEstimate`: for every local record, what
each live peer is likely to have admitted meanwhile (the local value times that peer's recent share
relative to this instance), counted in the throttle check (never in the sensor) until that peer's report
covering the time arrives or a horizon passes. A token bucket needs no estimate: late charges still land
in full. The error bounds are stated and measured in docs/fleet.md.

Instances come and go: a peer that stops publishing stops counting at once in the estimates (its liveness
is its last batch, empty batches included) and its charges age out of the sampled windows within one
quota window; a token bucket forgets nothing, but refills. A batch older than the quota window (a new
instance reading the topic's recent past) is skipped: its bytes can no longer be in any window.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from sluice.quota.keys import QuotaKey, SensorKind
from sluice.quota.managers import NANOS_TO_PERCENTAGE_PER_SECOND, ClientQuotaManager, QuotaManagers
from sluice.quota.sensor import QuotaSensor
from sluice.quota.usage_records import UsageBatch, UsageRow

# The bounds of the delivery delay's histogram, ms (each counts the batches at most that late).
DELAY_BUCKETS_MS = (100, 250, 500, 1000, 2000, 5000, 10_000)
# request_percentage measures this process's own CPU, which other instances do not share; byte rates and
# partition mutations load the one cluster behind every instance.
DEFAULT_SHARED_KEYS = frozenset(
    {QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONSUMER_BYTE_RATE, QuotaKey.CONTROLLER_MUTATION_RATE}
)
# How quickly a peer's share of an entity's traffic is forgotten (an exponential average, ms). Long enough
# to remember a flat-out client across most of the comb's ten-second pauses (chosen by simulation).
SHARE_MEMORY_MS = 15_000
# A peer whose recent share is at least this fraction of this instance's is assumed to admit at least as
# much as this instance meanwhile (see PeerEstimate.on_local).
ACTIVE_PEER_RATIO = 0.25
# A peer may be estimated to admit at most this many times what this instance admits meanwhile.
MAX_PEER_RATIO = 3.0
# A peer whose last batch is older than this many of its intervals is taken for gone.
LIVENESS_INTERVALS = 3


@dataclass(slots=True)
class _Peer:
    share: float = 0.0  # exponential average of its charges for this sensor
    pending: deque[list[float]] | None = None  # [local ms, estimated units] not yet covered by a report


class PeerEstimate:
    """Per sensor: other instances' recent share of its traffic, and their estimated unreported usage."""

    __slots__ = ("_last_ms", "_local", "_peers", "total")

    def __init__(self, now_ms: int) -> None:
        self._local = 0.0
        self._last_ms = now_ms
        self._peers: dict[str, _Peer] = {}
        self.total = 0.0  # the sum of every peer's pending estimate

    def _decay(self, now_ms: int) -> None:
        elapsed = now_ms - self._last_ms
        if elapsed > 0:
            factor = math.exp(-elapsed / SHARE_MEMORY_MS)
            self._local *= factor
            for peer in self._peers.values():
                peer.share *= factor
            self._last_ms = now_ms

    def on_local(self, value: float, now_ms: int, fleet: FleetQuotas) -> float:
        """Account a local record; return the pending estimate to check against."""
        self._decay(now_ms)
        local = self._local + value
        self._local = local if local > 0 else 0.0
        peers = self._peers
        for name in fleet.live:
            peer = peers.get(name)
            if peer is None or peer.share <= 0 or local <= 0:
                continue
            ratio = peer.share / local
            if ratio >= ACTIVE_PEER_RATIO and ratio < 1.0:
                # A peer that carries a fair part of this entity's traffic may take as much as this
                # instance when headroom opens: all flat-out clients burst at once. Assuming less lets
                # whichever instance burst first take more each time (docs/fleet.md).
                ratio = 1.0
            estimate = value * (ratio if ratio < MAX_PEER_RATIO else MAX_PEER_RATIO)
            pending = peer.pending
            if pending is None:
                pending = peer.pending = deque()
            if pending and pending[-1][0] == now_ms:
                pending[-1][1] += estimate
            else:
                pending.append([now_ms, estimate])
            self.total += estimate
        return self.pending(now_ms, fleet)

    def on_remote(self, name: str, value: float, now_ms: int) -> None:
        """A peer's charge for this sensor: its share grows."""
        self._decay(now_ms)
        peer = self._peers.get(name)
        if peer is None:
            peer = self._peers[name] = _Peer()
        peer.share += value

    def forget(self, name: str) -> None:
        """A peer went silent: its estimates no longer count. Its share is kept (it fades on its own), so a
        peer that was only late, on a starved machine, is estimated as before when it is heard again."""
        peer = self._peers.get(name)
        if peer is not None and peer.pending:
            self.total -= sum(entry[1] for entry in peer.pending)
            peer.pending.clear()

    def pending(self, now_ms: int, fleet: FleetQuotas) -> float:
        """The estimate of usage not yet reported: entries a peer's batch has since covered (it reported
        everything it admitted until then, this entity or not), or older than the horizon, are dropped."""
        oldest_kept = now_ms - fleet.horizon_ms
        covered = fleet.covered_to
        for name, peer in self._peers.items():
            before = covered.get(name, oldest_kept)
            self._drop(peer, before if before > oldest_kept else oldest_kept)
        if self.total < 1e-9:  # float residue once everything is dropped
            self.total = 0.0
        return self.total

    def _drop(self, peer: _Peer, before_ms: float) -> None:
        pending = peer.pending
        while pending and pending[0][0] < before_ms:
            self.total -= pending.popleft()[1]


class FleetQuotas:
    """Fleet mode for one :class:`QuotaManagers`: remote charges in, estimates into local checks.

    ``install`` hooks it into the shared managers; ``charge`` takes every batch read from the usage topic.
    ``horizon_ms`` is how long an estimate may wait for the report that replaces it: a few publish
    intervals plus the delivery time.
    """

    def __init__(
        self,
        managers: QuotaManagers,
        instance: str,
        shared: Iterable[QuotaKey] = DEFAULT_SHARED_KEYS,
        *,
        interval_ms: int = 1000,
        estimate: bool = True,
    ) -> None:
        self.managers = managers
        # False: charge reports only, no estimate of unreported usage (for measuring what it is worth).
        self.estimate = estimate
        self.instance = instance
        self.shared = frozenset(QuotaKey(key) for key in shared)
        self.horizon_ms = LIVENESS_INTERVALS * interval_ms
        # instance -> (last batch seen at, local ms; its interval in ms)
        self._peers: dict[str, tuple[int, int]] = {}
        # instance -> the end of its latest batch, on the sensors' clock: it has reported everything before.
        self.covered_to: dict[str, int] = {}
        self.live: tuple[str, ...] = ()
        self.batches_charged = 0
        self.batches_stale = 0
        # How late the latest batch arrived after its interval ended (wall clock), ms: D minus the interval;
        # and how many arrived how late, in DELAY_BUCKETS_MS (the last count: later than all of them), with
        # their sum: what a sample of the latest can miss.
        self.last_delay_ms = 0
        self.delay_counts = [0] * (len(DELAY_BUCKETS_MS) + 1)
        self.delay_sum_ms = 0

    def install(self) -> None:
        """Make the shared managers consult this fleet on every local record."""
        for key in self.shared:
            self.managers.manager(key).fleet = self

    # -- local records (called by the managers) ------------------------------------------------------

    def on_local(self, sensor: QuotaSensor, value: float, now_ms: int) -> float:
        """The pending estimate `sensor` must be checked with after recording `value` locally."""
        if not self.estimate or sensor.kind is SensorKind.TOKEN_BUCKET:
            # A token bucket conserves: every late charge still lands in full, so reports alone hold it to
            # the quota (docs/fleet.md); an estimate would only make it hold back more.
            return 0.0
        estimate = sensor.peers
        if estimate is None:
            if not self.live:
                return 0.0
            estimate = sensor.peers = PeerEstimate(now_ms)
        assert isinstance(estimate, PeerEstimate)
        return estimate.on_local(value, now_ms, self)

    # -- remote batches ------------------------------------------------------------------------------

    def peers(self) -> dict[str, int]:
        """Every instance heard from (other than this one), and when, in local ms."""
        return {name: seen for name, (seen, _interval) in self._peers.items()}

    def charge(self, batch: UsageBatch, now_ms: int, wall_now_ms: int) -> int:
        """Charge another instance's batch; returns the rows charged (0 for our own or a stale batch).

        `now_ms` is the sensors' clock, `wall_now_ms` the wall clock the batch's interval is stamped in.
        """
        if batch.instance == self.instance:
            return 0
        batch_end = batch.interval_start_ms + batch.interval_ms
        age_ms = max(0, wall_now_ms - batch_end)
        self.last_delay_ms = age_ms
        self.delay_counts[bisect_left(DELAY_BUCKETS_MS, age_ms)] += 1
        self.delay_sum_ms += age_ms
        # Where the batch's end falls on the sensors' clock: estimates before it are replaced by it.
        covered_to = now_ms - age_ms
        if covered_to > self.covered_to.get(batch.instance, covered_to - 1):
            self.covered_to[batch.instance] = covered_to
        self._seen(batch.instance, now_ms, batch.interval_ms)
        charged = 0
        counted = False
        for key in self.shared:
            manager = self.managers.manager(key)
            window = manager.window
            if age_ms > window.num_samples * window.window_ms:
                continue  # outside this quota's window: it no longer weighs on any sensor
            counted = True
            if not manager.quotas_enabled:
                continue
            for row in batch.rows:
                if row.topic is not None:
                    continue
                value = _value(key, row)
                if value:
                    self._charge(manager, batch.instance, row.user, row.client_id, value, now_ms)
                    charged += 1
        if counted:
            self.batches_charged += 1
        else:
            self.batches_stale += 1
        return charged

    def expire_peers(self, now_ms: int) -> list[str]:
        """Forget peers that stopped publishing; returns their names. Called on every charge and sweep."""
        gone = [
            name
            for name, (seen, interval) in self._peers.items()
            if now_ms - seen > LIVENESS_INTERVALS * interval
        ]
        if gone:
            for name in gone:
                del self._peers[name]
                self.covered_to.pop(name, None)
            for key in self.shared:
                for _tags, sensor in self.managers.manager(key).sensors():
                    if isinstance(sensor.peers, PeerEstimate):
                        for name in gone:
                            sensor.peers.forget(name)
            self.live = tuple(self._peers)
        return gone

    def _seen(self, name: str, now_ms: int, interval_ms: int) -> None:
        known = name in self._peers
        self._peers[name] = (now_ms, max(1, interval_ms))
        if not known:
            self.live = tuple(self._peers)
        self.expire_peers(now_ms)

    def _charge(
        self,
        manager: ClientQuotaManager,
        peer: str,
        user: str,
        client_id: str | None,
        value: float,
        now_ms: int,
    ) -> None:
        sensor = manager.sensor_for(user, client_id, now_ms)
        sensor.record(value, now_ms, False)
        estimate = sensor.peers
        if estimate is None:
            estimate = sensor.peers = PeerEstimate(now_ms)
        assert isinstance(estimate, PeerEstimate)
        estimate.on_remote(peer, value, now_ms)


def _value(key: QuotaKey, row: UsageRow) -> float:
    if key is QuotaKey.PRODUCER_BYTE_RATE:
        return row.produce_bytes
    if key is QuotaKey.CONSUMER_BYTE_RATE:
        return row.fetch_bytes
    if key is QuotaKey.REQUEST_PERCENTAGE:
        return row.cpu_time_ns * NANOS_TO_PERCENTAGE_PER_SECOND
    return row.partition_mutations
