"""CPU time of processes and of the whole machine, read from ``/proc`` (Linux).

For benchmarks that ask where the cores went: a process's CPU seconds (all its threads,
user and system) and the machine's busy seconds summed over every core, so that over a
window the difference of two readings divided by its length is the number of cores in
use (by that process, or by anything at all).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

_TICKS = os.sysconf("SC_CLK_TCK")


def process_seconds(pid: int) -> float:
    """CPU seconds ``pid`` has used so far (user + system, every thread).

    Raises OSError when the process is gone.
    """
    with open(f"/proc/{pid}/stat") as stat:
        # The command name (field 2) is in parentheses and may hold spaces: split after it.
        fields = stat.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    return (int(fields[11]) + int(fields[12])) / _TICKS


def main_thread_seconds(pid: int) -> float:
    """CPU seconds of ``pid``'s first thread (a worker's processing loop), without
    librdkafka's and RocksDB's threads.

    Raises OSError when the process is gone.
    """
    with open(f"/proc/{pid}/task/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def processes_seconds(pids: Iterable[int]) -> float:
    """CPU seconds of several processes together; one that is gone counts as 0."""
    total = 0.0
    for pid in pids:
        try:
            total += process_seconds(pid)
        except OSError:
            continue
    return total


def machine_busy_seconds() -> float:
    """Seconds every core together spent on anything but idling or waiting for I/O."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice: inside user/nice]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / _TICKS


def thread_seconds(pid: int) -> dict[str, float]:
    """CPU seconds of each of ``pid``'s live threads so far, summed by thread name (the
    kernel's ``comm``: at most 15 characters). Threads gone already are not counted.

    Raises OSError when the process is gone.
    """
    totals: dict[str, float] = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as stat:
                line = stat.read()
        except OSError:
            continue  # the thread ended meanwhile
        name = line[line.index("(") + 1 : line.rindex(")")]
        fields = line.rsplit(")", 1)[1].split()
        totals[name] = totals.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / _TICKS
    return totals
