"""What a process costs, read from /proc (Linux): CPU seconds, resident memory, open descriptors."""

from __future__ import annotations

import os
import resource
from pathlib import Path

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far (all its threads)."""
    user, system = user_system_seconds(pid)
    return user + system


def _stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat's fields after the command name: field 3 of proc(5) (1-based) at index 0."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name may hold spaces and parentheses; the fields after the last ')' are fixed.
    return stat.rsplit(")", 1)[1].split()


def user_system_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU time the process has used so far (all its threads), apart."""
    fields = _stat_fields(pid)
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5), 1-based
    return utime / _CLOCK_TICKS, stime / _CLOCK_TICKS


def minor_faults(pid: int) -> int:
    """The process's minor page faults so far (field 10 of proc(5)): counted pages, not time, so they do
    not move with what else runs on the machine."""
    return int(_stat_fields(pid)[7])


def precise_user_system_seconds(pid: int, proc: Path = Path("/proc")) -> tuple[float, float]:
    """User and system CPU time as `user_system_seconds`, to the nanosecond rather than the 10 ms clock
    tick: the total is the sum of every live thread's run time from /proc/<pid>/task/*/schedstat (the
    scheduler's own count, which /proc/<pid>/stat rounds down to ticks), split as `split_runtime` says. A
    thread that has exited is no longer counted: for the long-lived processes the benchmarks watch over a
    window (proxy, relay), not a concern."""
    return split_runtime(
        (proc / str(pid) / "stat").read_text(),
        [task.read_text() for task in (proc / str(pid) / "task").glob("*/schedstat")],
    )


def split_runtime(stat: str, schedstats: list[str]) -> tuple[float, float]:
    """(user, system) seconds: the schedstat run times' sum (ns), as /proc/<pid>/stat's user and system
    ticks plus the part the ticks have not counted (or counted ahead), that part split in the ticks'
    proportion. The difference of two readings is then the window's own ticks, give or take that part:
    splitting the whole sum in the lifetime's proportion, as this did before, moved a window's user time by
    the lifetime's CPU times the proportion's change, enough to make it negative for a short window."""
    fields = stat.rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    total = sum(int(text.split()[0]) for text in schedstats if text.strip()) / 1e9
    user_ticks, system_ticks = utime / _CLOCK_TICKS, stime / _CLOCK_TICKS
    rest = total - user_ticks - system_ticks
    user_share = utime / (utime + stime) if utime + stime else 1.0
    return user_ticks + rest * user_share, system_ticks + rest * (1 - user_share)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def children_cpu_seconds() -> float:
    """CPU time of this process's children that have been waited for (load generator subprocesses)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def raise_fd_limit(wanted: int) -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE towards `wanted` (up to the hard limit); children inherit it.
    Returns the (soft, hard) limits now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def machine_busy_cpu_seconds() -> float:
    """CPU time every process on the machine has used since boot (all cores), from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / _CLOCK_TICKS


def own_cpu_seconds() -> float:
    """CPU time of this process and of its children that have been waited for."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime + children_cpu_seconds()
