"""The real-client benchmark's arithmetic: CPU read from /proc texts, medians and ratios over rounds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_real_clients import MIDDLES, RELAY, SLUICE, SLUICE_BARE, Sample, rotated, summarize
from process_stats import precise_user_system_seconds, split_runtime

# /proc/<pid>/stat of a process named "python3 (x)": utime 300 ticks, stime 100 ticks (fields 14, 15).
STAT = "4242 (python3 (x)) S 1 4242 4242 0 -1 4194304 500 0 0 0 300 100 0 0 20 0 3 0 1 0 0"


def test_runtime_is_the_threads_schedstat_sum_split_as_stat_splits_it() -> None:
    # Two threads ran 1.5 s and 0.5 s (ns); stat says three quarters of the time was user space.
    user, system = split_runtime(STAT, ["1500000000 20 7\n", "500000000 3 1\n"])
    assert user == pytest.approx(1.5)
    assert system == pytest.approx(0.5)


def test_runtime_of_a_process_that_has_not_run_yet_is_all_user() -> None:
    idle = STAT.replace(" 300 100 ", " 0 0 ")
    assert split_runtime(idle, ["0 0 0\n"]) == (0.0, 0.0)
    assert split_runtime(idle, ["2000000 1 1\n"]) == (pytest.approx(0.002), 0.0)


def test_a_windows_user_time_is_its_own_ticks_not_the_lifetimes_proportion() -> None:
    # A process that ran 100 s in user space, then 0.1 s in the kernel: the window's user time is 0, its
    # system time 0.1 s (split in the lifetime's proportion, the user time came out at -0.01 s).
    before = STAT.replace(" 300 100 ", " 10000 0 ")
    after = STAT.replace(" 300 100 ", " 10000 10 ")
    user_before, system_before = split_runtime(before, ["100000000000 0 0\n"])
    user_after, system_after = split_runtime(after, ["100100000000 0 0\n"])
    assert user_after - user_before == pytest.approx(0.0, abs=1e-9)
    assert system_after - system_before == pytest.approx(0.1)


def test_precise_clock_reads_a_proc_tree(tmp_path: Path) -> None:
    task = tmp_path / "4242" / "task"
    for tid, ns in (("4242", 3_000_000_000), ("4243", 1_000_000_000)):
        (task / tid).mkdir(parents=True)
        (task / tid / "schedstat").write_text(f"{ns} 0 0\n")
    (tmp_path / "4242" / "stat").write_text(STAT)
    assert precise_user_system_seconds(4242, proc=tmp_path) == (pytest.approx(3.0), pytest.approx(1.0))


def _sample(round_no: int, middle: str, cpu_s: float, workload: str = "produce-16k-acks1") -> Sample:
    return Sample(round_no, middle, workload, gib=0.5, seconds=2.0, cpu_s=cpu_s, user_s=cpu_s / 2)


def test_ratio_is_of_the_medians_over_rounds_not_of_one_round() -> None:
    samples = [
        _sample(1, RELAY, 0.5),
        _sample(1, SLUICE, 0.55),
        _sample(2, RELAY, 0.4),
        _sample(2, SLUICE, 0.9),  # one noisy round for each
        _sample(3, RELAY, 0.5),
        _sample(3, SLUICE, 0.6),
    ]
    (verdict,) = summarize(samples)
    assert verdict.per_middle == {RELAY: pytest.approx(1.0), SLUICE: pytest.approx(1.2)}
    assert verdict.ratio == pytest.approx(1.2)
    assert verdict.ratio_bare is None
    assert verdict.mb_per_s[RELAY] == pytest.approx(0.5 * (1 << 30) / 1e6 / 2.0)


def test_each_workload_is_judged_on_its_own() -> None:
    samples = [
        _sample(1, m, cpu, w)
        for w, cpus in (("a", (1.0, 2.0, 1.5)), ("b", (1.0, 1.1, 1.0)))
        for m, cpu in zip(MIDDLES, cpus, strict=True)
    ]
    a, b = summarize(samples)
    assert (a.workload, a.ratio, a.ratio_bare) == ("a", pytest.approx(2.0), pytest.approx(1.5))
    assert (b.workload, b.ratio, b.ratio_bare) == ("b", pytest.approx(1.1), pytest.approx(1.0))


def test_every_middle_takes_every_place_in_turn() -> None:
    orders = [rotated(MIDDLES, round_no) for round_no in (1, 2, 3)]
    assert orders[0] == [RELAY, SLUICE, SLUICE_BARE]
    for place in range(3):
        assert {order[place] for order in orders} == set(MIDDLES)
