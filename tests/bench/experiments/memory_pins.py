"""What keeps pymalloc's arenas after a spike of connections: the memory test's spike (3,000 idle clients,
each with its own client id, and 2,000 half-open connections, all closed) against a real `sluice run` whose
memory return is watched from inside.

The proxy runs as this script's child (`--child`), which wraps `MemoryReturn._check`: at its first tick it
notes pymalloc's figures (`sys._debugmallocstats`) and the arenas in use; half a second after the memory
return's second run (the one the test measures; MEMORY_PINS_AFTER_S to wait longer), the figures again, then
every pymalloc pool in use (found by reading, only reading, the 16 KiB-aligned pool headers in anonymous
memory: blocks in use, arena index, block size) and every object it can reach (the collector's objects,
frozen ones included, what they refer to, tracked or not, and the tables lists, dicts, sets and instances
allocate beside themselves) placed in its pool. Arenas in use after the return that were not at the start
are the spike's: the report lists, for each, its pools, the objects found in them with a chain of what
holds each, and the blocks no reachable object accounts for (free lists, C structures); then, per kind of
holder, how many of those arenas it is in. With MEMORY_PINS_MARK=1 the objects in the spike's arenas just
after the return are noted too, and those still at the same address later are marked [old] (a churning
object whose replacement took the very block it freed reads as old as well).

Run: ``.venv/bin/python tests/bench/experiments/memory_pins.py [--out DIR]``; ``--summarize --out DIR``
prints an earlier run's report again. MEMORY_PINS_REORDER=density|start runs an experiment after each
renewal (`reorder_used_pools`).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import socket
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

POOL = 16 * 1024
ARENA = 1 << 20


# ---- the child: the proxy, watched from inside -------------------------------------------------------


def anonymous_ranges() -> list[tuple[int, int]]:
    """The process's anonymous read-write mappings, where pymalloc's arenas are (mmap'd, 1 MiB each)."""
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if fields[1].startswith("rw") and (len(fields) < 6 or fields[5] in ("[heap]",)):
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                ranges.append((lo, hi))
    return ranges


def pymalloc_pools() -> dict[int, tuple[int, int, int]]:
    """Every pymalloc pool in use: address -> (blocks used, arena index, block size). Found by reading
    (only) each 16 KiB-aligned header in anonymous memory and keeping those pymalloc's own invariants hold
    for: a size class under 32, `maxnextoffset` = pool size - block size, `nextoffset` on a block edge."""
    pools = {}
    for lo, hi in anonymous_ranges():
        address = -(-lo // POOL) * POOL
        while address + 48 <= hi:
            raw = ctypes.string_at(address, 48)
            count = int.from_bytes(raw[0:4], "little")
            arena = int.from_bytes(raw[32:36], "little")
            size_index = int.from_bytes(raw[36:40], "little")
            next_offset = int.from_bytes(raw[40:44], "little")
            max_next = int.from_bytes(raw[44:48], "little")
            size = (size_index + 1) * 16
            if (
                size_index < 32
                and max_next == POOL - size
                and 48 <= next_offset <= POOL
                and (next_offset - 48) % size == 0
                and 0 < count <= (POOL - 48) // size
                and arena < 100_000
            ):
                pools[address] = (count, arena, size)
            address += POOL
    return pools


def malloc_stats() -> dict[str, Any]:
    """sys._debugmallocstats()'s figures (it writes to the C stderr: taken from there)."""
    with tempfile.TemporaryFile(mode="w+") as out:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read()
    figures: dict[str, Any] = {"classes": {}}
    in_table = False
    for line in text.splitlines():
        if line.startswith("class   size   num pools"):
            in_table = True
            continue
        if in_table:
            parts = line.split()
            if len(parts) == 5 and parts[0].isdigit():
                figures["classes"][int(parts[1])] = {
                    "pools": int(parts[2]),
                    "blocks": int(parts[3]),
                    "avail": int(parts[4]),
                }
                continue
            if line.startswith("----"):
                continue
            in_table = False
        if "=" in line:
            key, _, value = line.rpartition("=")
            figures[key.strip().lstrip("#").strip()] = value.strip().replace(",", "")
    return figures


def reachable_objects(tracked: list[object]) -> list[object]:
    """The collector's objects (`tracked`) and everything they refer to, tracked or not."""
    seen = {id(o) for o in tracked}
    found = list(tracked)
    frontier = tracked
    while frontier:
        nxt = []
        for child in gc.get_referents(*frontier):
            if id(child) not in seen:
                seen.add(id(child))
                found.append(child)
                if not gc.is_tracked(child):
                    nxt.append(child)
        frontier = nxt
    return found


MANAGED_DICT = 1 << 4  # Py_TPFLAGS_MANAGED_DICT (3.11): the instance's values array hangs before it


def pointer(address: int) -> int:
    return ctypes.c_void_p.from_address(address).value or 0


def internal_blocks(obj: object) -> list[tuple[str, int]]:
    """The blocks a container allocates beside itself (CPython 3.11's layouts, read only): a list's item
    array, a dict's keys table and values array, a set's table once it outgrew the inline one, an
    instance's values array."""
    address = id(obj)
    found = []
    if isinstance(obj, list):
        found.append(("items", pointer(address + 24)))
    elif isinstance(obj, dict):
        found.append(("keys", pointer(address + 32)))
        found.append(("values", pointer(address + 40)))
    elif isinstance(obj, (set, frozenset)):
        table = pointer(address + 40)
        if not address < table < address + sys.getsizeof(obj):
            found.append(("table", table))
    if type(obj).__flags__ & MANAGED_DICT:
        found.append(("instance values", pointer(address - 32)))
    return [(kind, block) for kind, block in found if block]


def arena_placement(
    objects: list[object], pools: dict[int, tuple[int, int, int]]
) -> dict[int, dict[str, Any]]:
    """Per arena index: its pools in use {address: (blocks used, block size)}, the objects found in them,
    and the blocks containers hold there (owner, kind, address)."""
    arenas: dict[int, dict[str, Any]] = defaultdict(lambda: {"pools": {}, "objects": [], "internals": []})
    for address, (count, arena, size) in pools.items():
        arenas[arena]["pools"][address] = (count, size)
    for obj in objects:
        pool = id(obj) // POOL * POOL
        if pool in pools:
            arenas[pools[pool][1]]["objects"].append(obj)
        with contextlib.suppress(Exception):
            for kind, block in internal_blocks(obj):
                pool = block // POOL * POOL
                if pool in pools:
                    arenas[pools[pool][1]]["internals"].append((obj, kind, block))
    return arenas


def describe(obj: object) -> str:
    name = type(obj).__qualname__
    if name in ("TimerHandle", "Handle", "Future", "Task"):
        parts = []
        for referent in gc.get_referents(obj):
            label = getattr(referent, "__qualname__", None) or type(referent).__qualname__
            if type(referent).__name__ == "coroutine":
                label = f"coroutine {referent.__qualname__}"
            parts.append(label)
        return f"{name}({', '.join(parts)[:150]})"
    if isinstance(obj, (str, bytes)):
        return f"{name} {obj[:40]!r}"
    if isinstance(obj, (int, float)):
        return f"{name} {obj!r}"
    if isinstance(obj, list):
        return f"list({len(obj)})"
    if isinstance(obj, tuple):
        return f"tuple({len(obj)}) {', '.join(type(x).__name__ for x in obj[:4])}"
    if isinstance(obj, dict):
        return f"dict({len(obj)}) keys {list(obj)[:4]!r}"[:120]
    if callable(obj) and hasattr(obj, "__qualname__"):
        return f"{name} {getattr(obj, '__qualname__', '')}"
    return name


def how(referrer: object, current: object) -> str:
    """Where `referrer` holds `current`: a dict's key or an object's attribute, when it says."""
    with contextlib.suppress(Exception):
        items = referrer.items() if isinstance(referrer, dict) else vars(referrer).items()
        for key, value in items:
            if value is current:
                return f"[{key!r}]" if isinstance(referrer, dict) else f".{key}"
    return ""


def owners(obj: object, ignore: set[int], depth: int = 5) -> list[str]:
    """A chain of what refers to `obj`, up to `depth` steps (at each step the first referrer not already
    in the chain), each with the key or attribute it holds the previous one by."""
    chain: list[str] = []
    current = obj
    visited = {id(obj)}
    ignore = ignore | {id(sys._getframe()), id(chain), id(visited)}
    for _ in range(depth):
        found = gc.get_referrers(current)
        ignore.add(id(found))
        chosen = None
        others = 0
        for referrer in found:
            if id(referrer) in ignore or id(referrer) in visited:
                continue
            if chosen is None:
                chosen = referrer
            else:
                others += 1
        del found
        if chosen is None:
            break
        chain.append(describe(chosen) + how(chosen, current) + (f" (+{others})" if others else ""))
        visited.add(id(chosen))
        current = chosen
        chosen = None
        if type(current).__name__ == "module" or (
            isinstance(current, dict) and "__name__" in current and "__builtins__" in current
        ):
            break
    return chain


class Probe:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.start_arenas: set[int] | None = None
        self.marked: dict[int, str] = {}
        self.peak_live = 0

    def write(self, name: str, data: Any) -> None:
        (self.out / f"{name}.json").write_text(json.dumps(data, indent=1, default=str))

    def rss_mb(self) -> float:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def start(self) -> None:
        stats = malloc_stats()
        pools = pymalloc_pools()
        self.start_arenas = {arena for _, arena, _ in pools.values()}
        self.write("start", {"rss_mb": self.rss_mb(), "stats": stats, "arenas": sorted(self.start_arenas)})

    def peak(self, live: int) -> None:
        self.write("peak", {"rss_mb": self.rss_mb(), "live": live, "stats": malloc_stats()})

    def mark(self) -> None:
        """Note the objects in the spike's arenas just after the return, to tell, later, the ones that
        outlived it from the ones made since."""
        gc.unfreeze()
        try:
            holder = [gc.get_objects()]
            pools = pymalloc_pools()
            tracked = holder.pop()
            objects = reachable_objects(tracked)
            del tracked
            start = self.start_arenas or set()
            spike_pools = {pool for pool, (_, arena, _) in pools.items() if arena not in start}
            self.marked = {
                id(obj): type(obj).__qualname__ for obj in objects if id(obj) // POOL * POOL in spike_pools
            }
            del objects
        finally:
            gc.freeze()

    def after(self) -> None:
        rss = self.rss_mb()
        gc.unfreeze()  # gc.get_objects and gc.get_referrers see no frozen object
        try:
            # The objects first: what the probe makes after this (the pools' table, the figures) is left out.
            holder = [gc.get_objects()]
            pools = pymalloc_pools()
            stats = malloc_stats()
            self._after(rss, stats, pools, holder)
        finally:
            gc.freeze()

    def _after(
        self,
        rss: float,
        stats: dict[str, Any],
        all_pools: dict[int, tuple[int, int, int]],
        holder: list[list[object]],
    ) -> None:
        tracked = holder.pop()
        objects = reachable_objects(tracked)
        del tracked
        arenas = arena_placement(objects, all_pools)
        ignore = {id(objects), id(arenas), *(id(a["objects"]) for a in arenas.values())}
        ignore |= {id(a["internals"]) for a in arenas.values()}
        ignore |= {id(t) for a in arenas.values() for t in a["internals"]}
        ignore.add(id(sys._getframe()))
        report: dict[str, Any] = {
            "rss_mb": rss,
            "stats": stats,
            "start_arenas": sorted(self.start_arenas or ()),
            "pools_found": len(all_pools),
            "arenas": {},
        }
        start = self.start_arenas or set()
        for index, entry in sorted(arenas.items()):
            pools = entry["pools"]
            blocks = sum(count for count, _ in pools.values())
            row: dict[str, Any] = {
                "spike": index not in start,
                "pools_used": len(pools),
                "blocks_in_pools_seen": blocks,
                "objects_found": len(entry["objects"]),
                "pool_sizes": Counter(size for _, size in pools.values()).most_common(),
                "types": Counter(type(o).__qualname__ for o in entry["objects"]).most_common(12),
            }
            if index not in start:
                row["samples"] = []
                found_here = entry["objects"]
                for i in range(min(40, len(found_here))):
                    obj = found_here[i]
                    old = self.marked.get(id(obj)) == type(obj).__qualname__
                    row["samples"].append(
                        {"what": ("[old] " if old else "") + describe(obj), "owners": owners(obj, ignore)}
                    )
                    obj = None
                internals = entry["internals"]
                row["internals"] = []
                for i in range(min(40, len(internals))):
                    owner, kind, _ = internals[i]
                    row["internals"].append(
                        {"what": f"{kind} of {describe(owner)}", "owners": owners(owner, ignore)}
                    )
                # pools whose blocks the objects found do not account for: blocks no reachable object is
                # (free lists, C structures, a container's own table)
                by_pool = Counter(id(o) // POOL * POOL for o in entry["objects"])
                by_pool.update(block // POOL * POOL for _, _, block in internals)
                row["unexplained_pools"] = [
                    {"size": size, "count": count, "found": by_pool.get(pool, 0)}
                    for pool, (count, size) in pools.items()
                    if count > by_pool.get(pool, 0)
                ]
            report["arenas"][index] = row
        self.write("after", report)


# The pools objects alive at the first tick were in (for MEMORY_PINS_REORDER=start).
START_POOLS: set[int] = set()


def filler_maker(size: int) -> Any:
    """Objects taking one `size`-byte block each: large ints for 32 bytes, bytes objects above."""
    if size == 32:
        return (1 << 40).__add__
    length = size - 33
    return lambda _i: bytes(length)


def reorder_used_pools(limit: int = 20_000) -> int:
    """An experiment (MEMORY_PINS_REORDER), not in the product: fill every partly used pool of every size
    class with fillers (until a pool holds fillers only: pymalloc carves one only when no used pool has
    room), then free them so that chosen pools end at the heads of pymalloc's used-pool lists, which take
    the next allocations: the fullest of live objects ("density"), or the pools of the objects alive at
    start, fullest first ("start"). Returns the fillers made."""
    fillers: list[object] = []
    for size in range(32, 513, 16):
        capacity = (POOL - 48) // size
        make = filler_maker(size)
        start = len(fillers)
        per_pool: dict[int, int] = {}
        whole = False
        while not whole and len(fillers) - start < limit:
            for i in range(64):
                filler = make(i)
                fillers.append(filler)
                pool = id(filler) // POOL
                count = per_pool.get(pool, 0) + 1
                per_pool[pool] = count
                whole = whole or count == capacity
        del per_pool
    counts: dict[int, int] = {}
    for filler in fillers:
        pool = id(filler) // POOL
        counts[pool] = counts.get(pool, 0) + 1
    # Freed from the end: the pools to end at the heads (a pool goes there when a block is freed in it
    # while it is full) are freed last.
    if os.environ.get("MEMORY_PINS_REORDER") == "start":
        fillers.sort(key=lambda f: (id(f) // POOL not in START_POOLS, counts[id(f) // POOL]))
    else:
        fillers.sort(key=lambda f: counts[id(f) // POOL])
    made = len(fillers)
    counts.clear()
    while fillers:
        fillers.pop()
    return made


def run_child(out: Path) -> None:
    import asyncio

    from sluice.proxy.cli import main
    from sluice.proxy.process import memory_return

    probe = Probe(out)
    original = memory_return.MemoryReturn._check

    def watched(self: Any, now_ms: int) -> None:
        if os.environ.get("MEMORY_PINS_REORDER") and not hasattr(self, "_reordering"):
            self._reordering = True
            renew = self._renew

            def renew_and_reorder() -> None:
                renew()
                reorder_used_pools()

            self._renew = renew_and_reorder
        live = len(self._connections)
        again = self._again
        original(self, now_ms)
        if probe.start_arenas is None:
            probe.start()
            if os.environ.get("MEMORY_PINS_REORDER") == "start":
                gc.unfreeze()
                START_POOLS.update(id(o) // POOL for o in gc.get_objects())
                gc.freeze()
        if live > probe.peak_live and live >= 1000:
            probe.peak_live = live
            probe.peak(live)
        if again and not self._again:
            loop = asyncio.get_running_loop()
            if os.environ.get("MEMORY_PINS_MARK"):  # which pins outlive the return (slower, and takes memory)
                loop.call_later(0.1, probe.mark)
            loop.call_later(float(os.environ.get("MEMORY_PINS_AFTER_S", "0.5")), probe.after)

    memory_return.MemoryReturn._check = watched  # type: ignore[method-assign]
    sys.exit(main())


# ---- the driver: the spike -------------------------------------------------------------------------


def run_driver(out: Path) -> None:
    import resource

    tests = Path(__file__).resolve().parents[2]
    sys.path[:0] = [str(tests), str(tests / "proxy")]
    from mock_cluster_process import MockCluster
    from proxy_process import ProxyProcess
    from test_memory_return import HALF_OPEN, IDLE, open_spike, rss_mb, wait_for_metric
    from waiting import wait_until

    out.mkdir(parents=True, exist_ok=True)
    os.environ["MEMORY_PINS_OUT"] = str(out)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    patient = {"sasl": {"unauthenticated_frame_timeout_s": 600}}
    command = [sys.executable, str(Path(__file__).resolve()), "--child"]
    sockets: list[socket.socket] = []
    with (
        MockCluster(brokers=1) as cluster,
        ProxyProcess(cluster.bootstrap, extra_config=patient, command=command) as proxy,
    ):
        pid = proxy.process.pid
        wait_until(lambda: (out / "start.json").exists(), "the start snapshot", 30, interval_s=0.1)
        start = rss_mb(pid)
        try:
            open_spike(proxy, sockets)
            peak = rss_mb(pid)
            # The probe's peak figures come at the memory return's next tick.
            wait_until(lambda: peak_seen(out) == IDLE + HALF_OPEN, "the peak snapshot", 30, interval_s=0.1)
        finally:
            for sock in sockets:
                sock.close()
        wait_for_metric(proxy, "sluice_connections_active", 0)
        wait_until(lambda: (out / "after.json").exists(), "the after snapshot", 120, interval_s=0.2)
        after = rss_mb(pid)
        print(f"RSS MB start {start:.0f}, peak {peak:.0f}, after (probe included) {after:.0f}")
    summarize(out)


def peak_seen(out: Path) -> int:
    """The most connections the probe's peak figures were taken with (0 before any)."""
    with contextlib.suppress(OSError, ValueError):
        return int(json.loads((out / "peak.json").read_text())["live"])
    return 0


def summarize(out: Path) -> None:
    start = json.loads((out / "start.json").read_text())
    peak = json.loads((out / "peak.json").read_text()) if (out / "peak.json").exists() else None
    after = json.loads((out / "after.json").read_text())

    def line(name: str, snap: dict[str, Any]) -> str:
        s = snap["stats"]
        keys = [k for k in s if k.startswith("arenas allocated current")]
        arenas = s[keys[0]] if keys else "?"
        used = s.get("bytes in allocated blocks", "?")
        free = next((k.split()[0] for k in s if "unused pools" in k), "?")
        return (
            f"{name}: rss {snap['rss_mb']:.1f} MB, arenas {arenas}, bytes in blocks {used}, free pools {free}"
        )

    print(line("start", start))
    if peak:
        print(line("peak", peak))
    print(line("after", after))
    spike = {k: v for k, v in after["arenas"].items() if v["spike"]}
    print(f"arenas with reachable objects after: {len(after['arenas'])}, of which spike-born {len(spike)}")
    print_categories(spike)
    for index, row in spike.items():
        print(
            f"\narena {index}: pools seen {row['pools_used']}, blocks {row['blocks_in_pools_seen']}, "
            f"objects found {row['objects_found']}: {row['types'][:6]}"
        )
        for pool in row["unexplained_pools"][:6]:
            print(f"   pool of {pool['size']}-byte blocks: {pool['count']} used, {pool['found']} found")
        for sample in row["samples"] + row["internals"]:
            print(f"   {sample['what']:60.60}  <- {' <- '.join(sample['owners'])[:200]}")


# What holds a spike-born block, told by its description and its owners' (the first kind that matches).
CATEGORIES = [
    ("the probe's own", ("Probe",)),
    ("structlog loggers", ("BoundLogger", "PrintLogger", "finalized_bind")),
    ("ctypes (the C library)", ("CDLL", "PyCFuncPtrType")),
    ("abc caches", ("_abc_",)),
    ("broker loads", ("BrokerLoad",)),
    ("proxy metrics (counters, reasons)", ("ProxyMetrics",)),
    ("the client-id cache", ("_client_id_cache", "b'idle")),
    (
        "the quota store's follower (its fetch every 250 ms)",
        (
            "QuotaStoreService",
            "KafkaClient",
            "BrokerConnection",
            "_Pending",
            "shield.<locals>",
            "_release_waiter",
        ),
    ),
    ("other timers (periodic services)", ("TimerHandle", "UVTimer", "Periodic._run", "Loop")),
]


def category(sample: dict[str, Any]) -> str:
    text = sample["what"] + " " + " ".join(sample["owners"])
    for name, marks in CATEGORIES:
        if any(mark in text for mark in marks):
            return name
    return "other: " + sample["what"][:40]


UNOWNED = "blocks no reachable object accounts for (free lists, C structures)"


def print_categories(spike: dict[str, Any]) -> None:
    """Per spike-born arena, what is in it by kind; then, per kind, how many arenas it is in, and how many
    it keeps alone."""
    arenas_with: Counter[str] = Counter()
    alone: Counter[str] = Counter()
    for index, row in spike.items():
        kinds = Counter(category(s) for s in row["samples"] + row["internals"])
        unowned = sum(p["count"] - p["found"] for p in row["unexplained_pools"])
        if unowned:
            kinds[UNOWNED] += unowned
        print(f"arena {index}: {dict(kinds)}")
        arenas_with.update(kinds.keys())
        if len(kinds) == 1:
            alone[next(iter(kinds))] += 1
    print(f"\n{len(spike)} spike-born arenas left; per kind, the arenas it is in (and keeps alone):")
    for kind, count in arenas_with.most_common():
        print(f"  {count:3} ({alone[kind]}) {kind}")


def main() -> None:
    if "--child" in sys.argv:
        sys.argv.remove("--child")
        run_child(Path(os.environ["MEMORY_PINS_OUT"]))
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="memory-pins-")))
    parser.add_argument("--summarize", action="store_true", help="only summarize an earlier --out")
    args = parser.parse_args()
    if args.summarize:
        summarize(args.out)
    else:
        with contextlib.suppress(KeyboardInterrupt):
            run_driver(args.out)


if __name__ == "__main__":
    main()
