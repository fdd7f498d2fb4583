"""Two versions of Sluice as two middles of the same rounds of section 2b (bench_real_clients.py), the bare
relay beside them: what a change does to CPU per GiB with real clients, each round's runs close together
in time, so that the machine's drift from round to round falls on both alike.

`old` is the proxy started from another checkout's venv (its Python imports that checkout's code); `new`
is this one's. Both run section 2b's configuration (quotas and usage records). Per workload: the medians,
and the median and range of new / old over the rounds (one pair per round).

Run: ``.venv/bin/python tests/bench/experiments/code_against_code.py --old /work/wt-before --rounds 10
--workloads produce-16k-acks1`` (the old checkout installed in its own venv: ``make install`` there).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_real_clients as section
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess

OLD, NEW = "old", "new"


def starter(old_checkout: Path) -> section.MiddleStarter:
    """Section 2b's relay and Sluice (as `new`), and the same Sluice run from `old_checkout` (as `old`)."""
    old_command = [str(old_checkout / ".venv" / "bin" / "python"), "-m", "sluice.proxy"]

    @contextmanager
    def start(name: str, topics: Sequence[str]) -> Iterator[tuple[str, int]]:
        if name != OLD:
            with section.fresh_middle(section.SLUICE if name == NEW else name, topics) as started:
                yield started
            return
        with MockCluster(brokers=1, topics=dict.fromkeys(topics, section.PARTITIONS)) as cluster:
            proxy = ProxyProcess(
                cluster.bootstrap,
                extra_config=section.SLUICE_CONFIG,
                metrics=True,
                log_level="warning",
                command=old_command,
            )
            with proxy:
                yield proxy.bootstrap, proxy.process.pid

    return start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="the other checkout (with its .venv)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--records", type=int, default=section.RECORDS)
    parser.add_argument("--workloads", default="produce-16k-acks1,produce-64k-acks1,fetch-16k,fetch-64k")
    args = parser.parse_args()
    workloads = [w for w in section.WORKLOADS if w.name in args.workloads.split(",")]
    samples = section.measure(
        args.rounds, args.records, (section.RELAY, OLD, NEW), workloads, starter(args.old)
    )
    for workload in workloads:
        by = {
            m: sorted(
                (s.round_no, s.cpu_per_gib) for s in samples if s.workload == workload.name and s.middle == m
            )
            for m in (section.RELAY, OLD, NEW)
        }
        pairs = sorted(n / o for (_, o), (_, n) in zip(by[OLD], by[NEW], strict=True))
        medians = {m: statistics.median(v for _, v in by[m]) for m in by}
        print(
            f"{workload.name:20} relay {medians[section.RELAY]:.3f}  old {medians[OLD]:.3f}  "
            f"new {medians[NEW]:.3f} CPU s/GiB  new / old per round: median {statistics.median(pairs):.3f}, "
            f"{pairs[0]:.2f}-{pairs[-1]:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
