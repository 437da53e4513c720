"""Whether a timing had the machine to itself: the share of its CPU time that other processes took meanwhile, and
the precondition every timing claim of the book declares on it (the kernels appendix, aoe's throughput)."""

from __future__ import annotations

import time

import psutil

from ..core.claims import at_most

#: the share of the machine's CPU time other processes may take while a timing runs, for a timing claim to decide
FOREIGN_SHARE = 0.10

#: the machine's CPU-time counters that are not work: idle, waiting on I/O, and the guest time that Linux counts
#: inside user and nice already
NOT_BUSY = ("idle", "iowait", "guest", "guest_nice")


class ForeignLoad:
    """While the block runs, the share of the machine's CPU time that other processes used:
    (busy CPU time of the whole machine - this process's, all its threads) / (wall time x logical CPUs), from the
    operating system's counters (psutil). A niced process beside the benchmark slows every contender about alike,
    so the spread of the timing rounds does not show it; the CPU time it takes does."""

    def __enter__(self) -> ForeignLoad:
        self._start = self._counters()
        return self

    def __exit__(self, *exc) -> None:
        (busy0, own0, wall0), (busy1, own1, wall1) = self._start, self._counters()
        self.share = max(0.0, (busy1 - busy0) - (own1 - own0)) / ((wall1 - wall0) * psutil.cpu_count())

    @staticmethod
    def _counters() -> tuple[float, float, float]:
        machine, own = psutil.cpu_times()._asdict(), psutil.Process().cpu_times()
        busy = sum(v for k, v in machine.items() if k not in NOT_BUSY)
        return busy, own.user + own.system, time.perf_counter()


#: the precondition of every timing claim: it was timed on a machine it had to itself (`ForeignLoad`)
ALONE_ON_THE_MACHINE = at_most("alone_on_the_machine", "foreign_cpu_share", FOREIGN_SHARE,
                               f"other processes took at most {FOREIGN_SHARE:.0%} of the machine's CPU time while "
                               f"the timing ran (icml25.ops.timing.ForeignLoad)")
