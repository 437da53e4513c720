"""The Kernels appendix: what the compiled kernels claim about themselves, checked on the machine that built the
book (the kernels and their references live in `icml25.ops`; the benchmark in `icml25.ops.bench`).

The paired units are interleaved timing rounds: one round runs every contender of a case once (a fast one as a
unit of several calls in a row, `icml25.ops.bench.interleaved`), so it gives one paired value per case (a speedup,
or a fraction of a ceiling). Every claim here says that each of several cases clears its bar, and is decided by a
sign test per case:

    case c clears its bar b_c  <=>  the median over rounds of its value v_{c,r} lies above b_c
                               <=>  P(v_{c,r} >= b_c) > 1/2 over rounds,

tested on the 0/1 outcomes [v_{c,r} >= b_c] with an exact (Clopper-Pearson) interval for their share. "Every case
clears its bar" holds when every case's test does (an intersection-union test, so no correction for the number of
cases), which is the test of the *binding* case, the one with the fewest rounds at or above its bar: the effect's
units are that case's outcomes. With 12 rounds, reproduced needs the binding case at its bar in 10 of them
(share interval above 1/2), refuted needs it below in 10 (interval below 1/2; as the binding case is the worst of
several, a refutation is a little easier to reach by chance than a reproduction). A burst of load that slows one
contender in one or two rounds (which flipped the earlier worst-case-per-round t interval between identical
builds) moves no verdict.

faster_than_reference is decided otherwise (issue 56), because its binding case sat near its bar and the sign test
still flipped between identical builds (reproduced, inconclusive, refuted): what moves a case from build to build is
the build, not its rounds, and no statistic over the rounds of one build sees it. Per case c and round r it takes the
log speedup l_{c,r} = log(t_reference / t_compiled) and gives every case its own t interval that carries a random
build effect measured on calibration builds (contract v2's `run_sd`, one effect per case):

    mean_r l_{c,r} +- t_{R-1} sqrt(sd_r(l_{c,r})^2 / R + s_c^2),

s_c a one-sided 95% upper bound on that case's own between-build sd of its mean (`CASE_RUN_SD`,
`case_run_sd_upper` over the case's calibration builds `CASE_CALIBRATION_RUNS`: from about ten builds a plug-in
estimate would make the interval cover less than 95%). Reproduced when every case's interval lies above log MARGIN
(an intersection-union test: "every case clears its bar" holds when each case's own test does, so no correction
for the number of cases; the contract reproduces a claim only when every effect is reproduced), refuted when any
case's interval lies wholly below it, inconclusive otherwise; the deciding case (`deciding_case`) is the one with
the lowest lower bound, or for a refutation the case wholly below with the lowest upper bound. The calibration was
made at ci, so only ci's cases carry an s_c: at another scale the cases are other workloads (other sizes, and
labels that may coincide with ci's), every effect gets no rounds and the claim decides nothing. Until the second
design correction the claim was decided on the case with the lowest mean alone, by an interval widened by the
largest between-build sd of any case (`REFERENCE_RUN_SD`, set by the embedding bag's dense fwd+bwd at N=2^16,
whose builds scatter); that lent the binding expert layer a spread twenty times its own, and three verdict builds
were inconclusive (`LARGEST_SD_VERDICT_BUILDS`). Its rounds are a pass of their own on one thread
(`icml25.ops.bench.one_thread_x_reference`), every case's kernel and reference in the same interleaved rounds:
timed on the builder's two threads, the build means of the sparse cases and of the expert layer jumped by up to a
factor of two and a half between builds (`TWO_THREAD_CALIBRATION_RUNS`), because in episodes of a second or more
the second thread stops helping the reference's many small operations, and no build could be decided. So the claim
is about the speed of a kernel and its reference on one thread each, not on the whole machine. Its noise gate is
its own pass's (`QUIET_ONE_THREAD`: a copy timed in the same one-thread rounds, under quiet_machine's bar),
and the expert cases' reference is the sorted per-expert loop a competent PyTorch user writes
(`icml25.ops.bench.expert_sorted_loop`), not the naive loop the kernel's tests hold it to
(`icml25.ops.expert_ffn_reference`), since a referee (`REFEREE_151`) found the gate reading the two-thread pass and
a quarter of the expert margin in the naive loop's overheads.

Every claim here is timed with the C allocator's policy fixed for the whole benchmark process (issue 56, third design
correction; `icml25.ops.bench.fix_allocator`, precondition FIXED_ALLOCATOR): with glibc's default, whether the dense
N=2^16 case's 16 MiB gradient lay on fresh pages (a page fault and the system's zeroing per 4 KiB, for the kernel and
its reference alike) depended on the process's allocation history, so it moved from build to build: in six builds of the
pass (other processes took 2-31% of the CPU), 0-816 page faults in the median kernel call and 0-2048 in the median
reference call, different in each build; with the policy fixed, none in five builds (0-0.6% foreign CPU). On the machine
those builds ran on, the case's build means moved less than in the calibration below (0.88-1.08 before the fix,
0.98-1.13 after; between-build sd of the mean, `icml25.core.claims.between_run_sd`, 0.055 from six builds and 0.036 from
five), and its kernel's median call still ranged 2.4-3.2 ms between builds with no page fault at all: the allocator was
a source of the scatter, not the whole of it. The between-build sd each case carried until then
(`OLD_MACHINE_CASE_RUN_SD`) was measured before the fix and on another machine (there expert_ffn d=128 ran at log
0.21 over its reference and the ci notebook took 45 s; on the machine of the builds above at about 0.46, and the
notebook 438 s, most of it the quantiser's tensor of twice a last-level cache that reads 480 MiB, since capped at ci
by `icml25.ops.bench.fp_shape`), so CASE_RUN_SD is measured again on this machine under the fixed policy and the
cap, by the same rule and bound, on fresh calibration builds (`CASE_CALIBRATION_RUNS`), before any verdict build
with it (issue 56, fourth design correction: the s_c values only).
"""

import math
import statistics

from scipy import stats

from .core.claims import REFUTED, Claim, Effect, Precondition, at_least, between_run_sd
from .ops.timing import ALONE_ON_THE_MACHINE

#: the declared margin: a kernel counts as faster only if it is at least this much faster than its reference
MARGIN = 1.10
#: the timing noise the claims tolerate: the interquartile range of the copy ceiling's rounds over their median, in
#: one run (each round a unit of calls of at least `icml25.ops.bench.MIN_UNIT_SECONDS`)
QUIET = 0.25
#: the issue's targets, declared before any run: fractions of the copy ceiling and speedups over stock PyTorch
UNSCALED_OF_CEILING, BLOCKED_OF_CEILING = 0.5, 0.4
BAG_FORWARD_X_STOCK, BAG_STEP_X_BEST_STOCK, MOE_X_LOOP = 1.0, 2.0, 1.5
#: the expert layer's target restated against the machine's GEMM ceiling (the best FLOP rate of torch.mm over the
#: layer's own GEMM shapes and large square ones): MOE_X_LOOP times the loop, or this fraction of the ceiling where
#: MOE_X_LOOP times the loop would lie beyond it, i.e. min(MOE_X_LOOP, MOE_OF_CEILING * attainable) times the loop
MOE_OF_CEILING = 0.9
#: the quantiser's tensor must be at least this many last-level caches for a bandwidth fraction to mean memory
MIN_CACHE_MULTIPLE = 2.0
#: rounds a verdict rests on (contract v2: at least 8 paired units)
MIN_ROUNDS = 10


def binding_case(rows: list[dict], key: str, bar: float) -> tuple[str, list[float]]:
    """Among `rows`, the case with the fewest rounds whose `key` (a per-round value) is at least `bar`, and its
    per-round 0/1 outcomes: the units of the sign test that every case's median clears `bar`."""
    outcomes = {f"{r['kernel']} {r['label']}": [float(v >= bar) for v in r[key]] for r in rows}
    case = min(outcomes, key=lambda c: sum(outcomes[c]))
    return case, outcomes[case]


#: The first calibration builds of faster_than_reference (none of them a verdict), when its rounds were those of
#: the benchmark's two-thread passes: `icml25.ops.bench.run` at ci, each in a process of its own with the builder's
#: thread settings (OMP_NUM_THREADS = MKL_NUM_THREADS = 2, every core), one after another on the machine held alone,
#: seeds 111-116; the four whose preconditions held (alone, quiet) are kept (111 and 114 failed quiet_machine). Per
#: case, each build's (mean, sd) over its 12 rounds of the log speedup over the reference. The sparse cases move
#: between builds from about 1x to about 2.4x their reference (one build each). Kept for the page: they are why the
#: claim is now timed on one thread.
TWO_THREAD_CALIBRATION_RUNS = {
    "embedding_bag fwd, N=2^14": ((1.6434, 0.2283), (1.5765, 0.1711), (1.5634, 0.0469), (1.5292, 0.0983)),
    "embedding_bag fwd+bwd dense, N=2^14": ((1.6249, 0.1376), (1.3779, 0.1408), (1.3598, 0.1275), (1.4648, 0.1619)),
    "embedding_bag fwd+bwd sparse, N=2^14": ((0.8902, 0.1147), (-0.0910, 0.1985), (0.5697, 0.2984), (0.7480, 0.1672)),
    "embedding_bag fwd, N=2^16": ((1.6068, 0.1180), (1.5053, 0.0610), (1.5184, 0.0598), (1.4948, 0.0937)),
    "embedding_bag fwd+bwd dense, N=2^16": ((1.2202, 0.1453), (1.2303, 0.2334), (1.4852, 0.2792), (0.7878, 0.3187)),
    "embedding_bag fwd+bwd sparse, N=2^16": ((0.7025, 0.0847), (0.7818, 0.1229), (0.0673, 0.1549), (0.7629, 0.2871)),
    "expert_ffn d=64": ((0.7617, 0.0569), (0.7681, 0.0713), (1.2578, 0.0628), (0.8968, 0.4455)),
    "expert_ffn d=128": ((0.4646, 0.0493), (0.4416, 0.1628), (0.8393, 0.0546), (0.4759, 0.1020)),
}
TWO_THREAD_CALIBRATION_ROUNDS = 12

#: The first calibration builds of faster_than_reference's one-thread pass (none of them a verdict), kept for the
#: page: they set the largest-over-cases run_sd of 6daf9c7's design (`REFERENCE_RUN_SD`). `icml25.ops.bench.run` at
#: ci, each in a process of its own with the builder's thread settings, one after another on the machine held alone,
#: seeds 121-128; per case, each build's (mean, sd) over its rounds of the log speedup over
#: the reference on one thread (`per_round_one_thread`). Every build's preconditions held (other processes took at
#: most 1.2% of the CPU time, the copy's quartile spread at most 0.18). The widest case is the dense fwd+bwd at
#: N=2^16, whose rounds also spread the most within a build. At 32 rounds the within-build term sd^2 / R of a
#: case's interval is at most 11% of s_run^2 (its largest sd, 0.41), so more rounds would hardly narrow it.
REFERENCE_CALIBRATION_RUNS = {
    "embedding_bag fwd, N=2^14": (
        (1.8171, 0.1577), (1.6317, 0.0769), (1.6994, 0.1297), (1.9361, 0.2232),
        (1.6894, 0.0936), (1.7439, 0.1283), (1.7819, 0.2368), (1.6262, 0.1201)),
    "embedding_bag fwd+bwd dense, N=2^14": (
        (1.6317, 0.1257), (1.5225, 0.1079), (1.5376, 0.1176), (1.5651, 0.2221),
        (1.5266, 0.0860), (1.5258, 0.1151), (1.4821, 0.1351), (1.5282, 0.2068)),
    "embedding_bag fwd+bwd sparse, N=2^14": (
        (0.9790, 0.1028), (0.7992, 0.0945), (0.8489, 0.1714), (0.9424, 0.2129),
        (0.7649, 0.0743), (0.8218, 0.0902), (0.8001, 0.1541), (0.8998, 0.2195)),
    "embedding_bag fwd, N=2^16": (
        (1.7744, 0.1969), (1.5765, 0.1343), (1.5870, 0.1576), (1.7610, 0.2290),
        (1.6548, 0.1114), (1.6817, 0.1754), (1.7105, 0.1902), (1.5108, 0.1637)),
    "embedding_bag fwd+bwd dense, N=2^16": (
        (1.1588, 0.3452), (1.2128, 0.1201), (0.9278, 0.3905), (0.5653, 0.4104),
        (1.0951, 0.1768), (1.0963, 0.2379), (1.1640, 0.2998), (0.7823, 0.2997)),
    "embedding_bag fwd+bwd sparse, N=2^16": (
        (0.7864, 0.1917), (0.7381, 0.0587), (0.6696, 0.1757), (0.7544, 0.1930),
        (0.6291, 0.0959), (0.6617, 0.2090), (0.6932, 0.1884), (0.6427, 0.1823)),
    "expert_ffn d=64": (
        (0.4333, 0.0637), (0.4499, 0.0234), (0.4700, 0.0746), (0.4649, 0.1276),
        (0.4389, 0.0301), (0.4664, 0.0817), (0.4955, 0.0977), (0.4962, 0.0899)),
    "expert_ffn d=128": (
        (0.2878, 0.0896), (0.2586, 0.0193), (0.2827, 0.0614), (0.2932, 0.0866),
        (0.2756, 0.0248), (0.2514, 0.0493), (0.2933, 0.0975), (0.2854, 0.0448)),
}
REFERENCE_CALIBRATION_ROUNDS = 32


def case_run_sd(runs: dict[str, tuple], rounds: int) -> dict[str, float]:
    """Per case of `runs` ({case: ((mean, sd) per build)}) the between-build sd of its mean
    (`icml25.core.claims.between_run_sd`), rounded to 4 places."""
    return {case: round(between_run_sd(*zip(*builds), rounds), 4) for case, builds in runs.items()}


def largest_run_sd(runs: dict[str, tuple], rounds: int) -> float:
    """The largest over the cases of `runs` of the between-build sd of a case's mean (`case_run_sd`)."""
    return max(case_run_sd(runs, rounds).values())


#: the between-build sd that 6daf9c7's design lent the case with the lowest mean: the largest over the cases of the
#: first one-thread calibration (history: the claim now carries each case's own, `CASE_RUN_SD`)
REFERENCE_RUN_SD = largest_run_sd(REFERENCE_CALIBRATION_RUNS, REFERENCE_CALIBRATION_ROUNDS)

#: The three verdict builds of 6daf9c7's design (the lowest-mean case with REFERENCE_RUN_SD), recorded in the ledger
#: at a5b2894, as the builds printed them: the case with the lowest mean and its log speedup, estimate and 95%
#: interval. All three were inconclusive, on the same case, whose own between-build sd in the first calibration was
#: a twentieth of the one it was lent; they are why each case now carries its own. Kept for the page.
LARGEST_SD_VERDICT_BUILDS = (
    ("expert_ffn d=128", 0.2655, -0.1826, 0.7137),
    ("expert_ffn d=128", 0.2511, -0.1972, 0.6993),
    ("expert_ffn d=128", 0.2572, -0.1907, 0.7052),
)

#: The first calibration builds that set each case's own between-build sd, for 7d230ec's design (none of them a
#: verdict, and never seen by a statistic of the claim before its declaration; history since the expert cases'
#: reference became `icml25.ops.bench.expert_sorted_loop`, kept for the page): `icml25.ops.bench.run` at ci with
#: bench seeds never used before, each in a process of its own with the builder's thread settings
#: (OMP_NUM_THREADS = MKL_NUM_THREADS = 2), one after another, each under the machine's timing lock. Seeds 131-138
#: were planned; a build whose preconditions failed is dropped, as in the two-thread calibration, and replaced by
#: the next unused seed (a rule fixed after the first build's noise gate was seen and before any case's value was
#: looked at): `FIRST_CASE_CALIBRATION_DROPPED` says which and why. Per case, each kept build's (mean, sd) over its
#: `FIRST_CASE_CALIBRATION_ROUNDS` rounds of the log speedup over the reference on one thread
#: (`per_round_one_thread`), seeds in order; the expert cases' reference was then the naive loop
#: `icml25.ops.expert_ffn_reference`.
FIRST_CASE_CALIBRATION_SEEDS = tuple(range(131, 143))
FIRST_CASE_CALIBRATION_DROPPED = {
    131: "quiet_machine: the copy's quartile spread 0.286",
    132: "alone_on_the_machine: other processes took 26.7% of the CPU",
    137: "alone_on_the_machine: other processes took 10.9% of the CPU",
    140: "quiet_machine: the copy's quartile spread 0.345",
}
FIRST_CASE_CALIBRATION_ROUNDS = 32
FIRST_CASE_CALIBRATION_RUNS = {
    "embedding_bag fwd, N=2^14": (
        (1.6735, 0.0617), (1.8974, 0.1715), (2.0742, 0.3524), (1.9177, 0.2016),
        (2.1369, 0.3181), (1.8792, 0.2178), (2.0324, 0.2760), (2.1821, 0.2267)),
    "embedding_bag fwd+bwd dense, N=2^14": (
        (1.4533, 0.0937), (1.5654, 0.1865), (1.4714, 0.2130), (1.5781, 0.1398),
        (1.6211, 0.3309), (1.5335, 0.1612), (1.6166, 0.2326), (1.6454, 0.2919)),
    "embedding_bag fwd+bwd sparse, N=2^14": (
        (0.7411, 0.1118), (0.9576, 0.1889), (0.9721, 0.2469), (0.9906, 0.1247),
        (0.9538, 0.2672), (0.8487, 0.1059), (1.0212, 0.2661), (1.0790, 0.1917)),
    "embedding_bag fwd, N=2^16": (
        (1.4750, 0.0925), (1.7311, 0.2472), (1.9246, 0.2539), (1.7487, 0.1823),
        (2.0601, 0.2032), (1.8253, 0.2008), (2.0021, 0.2830), (1.7701, 0.2034)),
    "embedding_bag fwd+bwd dense, N=2^16": (
        (1.1639, 0.2818), (0.7894, 0.4945), (0.6699, 0.3860), (0.9949, 0.5168),
        (0.7520, 0.3283), (0.9860, 0.1493), (0.8553, 0.4352), (0.9401, 0.3329)),
    "embedding_bag fwd+bwd sparse, N=2^16": (
        (0.5620, 0.1703), (0.7462, 0.2029), (0.7962, 0.2237), (0.7335, 0.2038),
        (0.5698, 0.2466), (0.7913, 0.1056), (0.6943, 0.2549), (0.5213, 0.3854)),
    "expert_ffn d=64": (
        (0.4240, 0.0412), (0.4473, 0.0818), (0.4302, 0.1265), (0.4469, 0.0859),
        (0.4692, 0.1538), (0.4500, 0.0718), (0.4215, 0.1171), (0.4618, 0.1009)),
    "expert_ffn d=128": (
        (0.2738, 0.0210), (0.3025, 0.0774), (0.2837, 0.1347), (0.3108, 0.0572),
        (0.3412, 0.0805), (0.3146, 0.0700), (0.2767, 0.0699), (0.2878, 0.0786)),
}
FIRST_CASE_CALIBRATION_KEPT = len(FIRST_CASE_CALIBRATION_SEEDS) - len(FIRST_CASE_CALIBRATION_DROPPED)


#: the between-build sd each case carried in 7d230ec's design (history, for the page)
FIRST_CASE_RUN_SD = case_run_sd(FIRST_CASE_CALIBRATION_RUNS, FIRST_CASE_CALIBRATION_ROUNDS)

#: the confidence of the upper bound on each case's between-build sd that its interval carries (`case_run_sd_upper`)
RUN_SD_CONFIDENCE = 0.95


def case_run_sd_upper(runs: dict[str, tuple], rounds: int, confidence: float = RUN_SD_CONFIDENCE
                      ) -> dict[str, float]:
    """Per case of `runs` ({case: ((mean, sd) per build)}), a one-sided `confidence` upper bound on the
    between-build sd of its mean, rounded to 4 places. With B builds of R rounds, the build means are normal with
    variance s_c^2 + sigma^2 / R, which (B - 1) var(means) / chi2_{1 - confidence}(B - 1) bounds from above; the
    within-build part, mean(sd^2) / R on B (R - 1) df, is subtracted as in `between_run_sd`:

        s_c+ = sqrt(max(0, (B - 1) var(means) / chi2_{1 - confidence}(B - 1) - mean(sd^2) / R))."""
    bounds = {}
    for case, builds in runs.items():
        means, sds = zip(*builds)
        df = len(means) - 1
        variance = df * statistics.variance(means) / stats.chi2.ppf(1 - confidence, df)
        bounds[case] = round(math.sqrt(max(0.0, variance - statistics.fmean(s * s for s in sds) / rounds)), 4)
    return bounds


#: calibration builds kept for each case's between-build sd, their scale and their rounds
CALIBRATION_BUILDS = 10
CASE_CALIBRATION_SCALE = "ci"
CASE_CALIBRATION_ROUNDS = 32


#: The calibration builds of faster_than_reference's second redeclaration (none of them a verdict), on the machine
#: its verdict builds ran on before the book moved to the present one and before the allocator's policy was fixed
#: (history since this machine's calibration, `CASE_CALIBRATION_RUNS`, kept for the page): they set each case's
#: between-build sd then (`OLD_MACHINE_CASE_RUN_SD`) and the bar of the one-thread pass's noise gate.
#: `icml25.ops.bench.run` at ci with bench seeds never used before (161-170 planned, 161-177 run), each in a process
#: of its own with the builder's thread settings (OMP_NUM_THREADS = MKL_NUM_THREADS = 2), one after another, each
#: under the machine's timing lock; the expert cases' reference is `icml25.ops.bench.expert_sorted_loop`, and the
#: copy is timed in the one-thread pass's rounds. The rule, fixed before the first build: a build that fails a
#: precondition of the claim (alone on the machine, the one-thread gate, the rounds) is dropped and replaced by the
#: next unused seed, until CALIBRATION_BUILDS builds are kept (seed 178 was started after the tenth was kept, and
#: stopped unread). The gate's bar was first planned as twice the median one-thread copy spread of the first ten
#: builds alone; before any verdict build, once the first three builds alone had spreads 0.023, 0.034 and 0.111, it
#: became the two-thread gate's own bar QUIET: a bar at twice the median would reject builds alone on the machine
#: for a tail of the copy's own spread, not for a disturbance, and so flip verdicts between identical builds, the
#: fault the referee found in the two-thread gate.
#: The ten builds alone bore it out: two of them (168, 173; at most 0.6% foreign CPU) at 0.11-0.14, median 0.03.
#: `OLD_MACHINE_CALIBRATION_COPY_SPREADS`: every build alone on the machine, {seed: its one-thread copy's quartile
#: spread}; `OLD_MACHINE_CALIBRATION_DROPPED`: which builds were dropped and why; `OLD_MACHINE_CALIBRATION_RUNS`: per
#: case, each kept build's (mean, sd) over its rounds of the log speedup over the reference on one thread, seeds in
#: order.
OLD_MACHINE_CALIBRATION_SEEDS = tuple(range(161, 178))
OLD_MACHINE_CALIBRATION_COPY_SPREADS = {
    162: 0.0227, 167: 0.0336, 168: 0.1112, 171: 0.032, 172: 0.0271, 173: 0.137,
    174: 0.0552, 175: 0.032, 176: 0.021, 177: 0.0184,
}
OLD_MACHINE_CALIBRATION_DROPPED = {
    161: "alone_on_the_machine: other processes took 58.2% of the CPU",
    163: "alone_on_the_machine: other processes took 13.9% of the CPU",
    164: "alone_on_the_machine: other processes took 13.4% of the CPU",
    165: "alone_on_the_machine: other processes took 20.5% of the CPU",
    166: "alone_on_the_machine: other processes took 26.8% of the CPU",
    169: "alone_on_the_machine: other processes took 41.0% of the CPU",
    170: "alone_on_the_machine: other processes took 37.8% of the CPU",
}
OLD_MACHINE_CALIBRATION_RUNS = {
    "embedding_bag fwd, N=2^14": (
        (1.6297, 0.1001), (1.7078, 0.1115), (1.5736, 0.1220), (1.7207, 0.0969),
        (1.6216, 0.1107), (1.6423, 0.1688), (1.6114, 0.0699), (1.5666, 0.0563),
        (1.6137, 0.0820), (1.6473, 0.1013)),
    "embedding_bag fwd+bwd dense, N=2^14": (
        (1.5211, 0.0751), (1.5103, 0.1042), (1.5183, 0.1146), (1.4923, 0.0843),
        (1.5346, 0.1272), (1.5682, 0.1353), (1.4595, 0.0912), (1.5264, 0.1033),
        (1.5497, 0.1217), (1.5084, 0.0642)),
    "embedding_bag fwd+bwd sparse, N=2^14": (
        (0.8140, 0.0506), (0.8177, 0.1502), (0.7558, 0.1116), (0.8087, 0.0891),
        (0.7804, 0.1033), (0.8545, 0.1228), (0.7095, 0.1019), (0.8056, 0.1437),
        (0.8322, 0.1621), (0.7588, 0.0614)),
    "embedding_bag fwd, N=2^16": (
        (1.6024, 0.1222), (1.5558, 0.1516), (1.5441, 0.1589), (1.6432, 0.1378),
        (1.6022, 0.0963), (1.7481, 0.1520), (1.4537, 0.0819), (1.5519, 0.1064),
        (1.4602, 0.0866), (1.5600, 0.0828)),
    "embedding_bag fwd+bwd dense, N=2^16": (
        (1.3897, 0.3515), (1.3249, 0.3183), (1.3411, 0.2495), (1.3023, 0.3505),
        (1.1092, 0.4423), (1.2081, 0.2868), (1.2508, 0.1331), (1.1156, 0.4316),
        (0.6649, 0.5931), (1.1975, 0.1559)),
    "embedding_bag fwd+bwd sparse, N=2^16": (
        (0.7032, 0.1670), (0.5789, 0.1869), (0.6350, 0.1721), (0.5724, 0.2043),
        (0.6828, 0.2088), (0.5776, 0.1773), (0.6323, 0.0896), (0.6111, 0.1815),
        (0.6821, 0.1779), (0.6674, 0.1188)),
    "expert_ffn d=64": (
        (0.3040, 0.0536), (0.2795, 0.0500), (0.3027, 0.0596), (0.3444, 0.0682),
        (0.3034, 0.0460), (0.3304, 0.0736), (0.3048, 0.0515), (0.3177, 0.0493),
        (0.2460, 0.0649), (0.3064, 0.0422)),
    "expert_ffn d=128": (
        (0.2193, 0.0200), (0.2229, 0.0415), (0.2074, 0.0403), (0.2361, 0.0313),
        (0.1958, 0.0335), (0.2095, 0.0297), (0.2067, 0.0215), (0.2099, 0.0164),
        (0.2156, 0.0349), (0.2092, 0.0210)),
}
OLD_MACHINE_CALIBRATION_KEPT = len(OLD_MACHINE_CALIBRATION_SEEDS) - len(OLD_MACHINE_CALIBRATION_DROPPED)
#: the between-build sd each case carried in c94c5ce's design (history, for the page)
OLD_MACHINE_CASE_RUN_SD = case_run_sd_upper(OLD_MACHINE_CALIBRATION_RUNS, CASE_CALIBRATION_ROUNDS)

#: The three verdict builds of c94c5ce's design on the old machine, one after another alone on it, recorded in the
#: ledger: {bench seed: (verdict, deciding case, its log speedup, 95% interval)}, as the builds printed them. Seed 0
#: is the book's (CI builds it); 181 and 182 were never used. The dense fwd+bwd case at N=2^16 carries the largest s_c
#: (its calibration builds ranged 0.66-1.39 in logs), so its interval spans about +-0.7 and reaches the bar in some
#: builds: the label is not yet the same in every build.
OLD_MACHINE_VERDICT_BUILDS = {
    0: ("inconclusive", "embedding_bag fwd+bwd dense, N=2^16", 0.6298, -0.0637, 1.3233),
    181: ("reproduced", "expert_ffn d=128", 0.2191, 0.1807, 0.2575),
    182: ("reproduced", "expert_ffn d=128", 0.2306, 0.1925, 0.2687),
}

#: The calibration builds of the present design (issue 56, fourth design correction; none of them a verdict): each
#: case's between-build sd measured again on the machine the book is now built on, with the allocator's policy fixed
#: (`icml25.ops.bench.fix_allocator`) and the quantiser's ci tensor capped at 128 MiB (`icml25.ops.bench.fp_shape`),
#: since `OLD_MACHINE_CASE_RUN_SD` was measured on another machine and before the fix. `icml25.ops.bench.run` at ci with
#: bench seeds never used before, 331-340 planned, each in a process of its own with the builder's thread settings
#: (OMP_NUM_THREADS = MKL_NUM_THREADS = 2), one after another, each alone under the machine's timing lock. The rule,
#: fixed before the first build: a build that fails a precondition of the claim (alone on the machine, the one-thread
#: gate, the rounds, the fixed allocator) is dropped and replaced by the next unused seed from 350 up (341 and 342 were
#: set aside for verdict builds), until CALIBRATION_BUILDS builds are kept. Four builds under the fix but before the
#: cap (`PRE_CAP_CALIBRATION_SEEDS`) are not used: the cap changed the quantiser's workload that runs before the
#: one-thread pass and the gate's copy in it. `CASE_CALIBRATION_FOREIGN_SHARES`: {seed: the share of the machine's CPU
#: time other processes took} for every build run; `CASE_CALIBRATION_COPY_SPREADS`: {seed: the one-thread copy's
#: quartile spread} for every build kept; `CASE_CALIBRATION_DROPPED`: which builds were dropped and why;
#: `CASE_CALIBRATION_RUNS`: per case, each kept build's (mean, sd) over its rounds of the log speedup over the
#: reference on one thread, seeds in order.
PRE_CAP_CALIBRATION_SEEDS = (301, 302, 303, 304)
CASE_CALIBRATION_SEEDS = (331, 332, 333, 334, 335, 336, 337, 338, 339, 340, 350)
CASE_CALIBRATION_FOREIGN_SHARES = {
    331: 0.0132, 332: 0.0103, 333: 0.0532, 334: 0.0045, 335: 0.0046, 336: 0.2232,
    337: 0.0047, 338: 0.0037, 339: 0.0231, 340: 0.0042, 350: 0.0053,
}
CASE_CALIBRATION_COPY_SPREADS = {
    331: 0.0176, 332: 0.0251, 333: 0.0203, 334: 0.0098, 335: 0.0251, 337: 0.0107,
    338: 0.0106, 339: 0.0138, 340: 0.017, 350: 0.0256,
}
CASE_CALIBRATION_DROPPED = {
    336: "alone_on_the_machine: other processes took 22.3% of the CPU",
}
CASE_CALIBRATION_RUNS = {
    "embedding_bag fwd, N=2^14": (
        (2.0913, 0.0825), (2.0573, 0.0747), (2.0634, 0.0832), (2.1276, 0.0677),
        (2.0990, 0.0612), (2.1143, 0.0777), (2.0639, 0.0528), (2.1159, 0.0850),
        (2.0587, 0.0684), (2.0778, 0.0780)),
    "embedding_bag fwd+bwd dense, N=2^14": (
        (1.6292, 0.1214), (1.6567, 0.1031), (1.6541, 0.0980), (1.5710, 0.1211),
        (1.6304, 0.0891), (1.5891, 0.0964), (1.5787, 0.0872), (1.5804, 0.0913),
        (1.5851, 0.1054), (1.6581, 0.0904)),
    "embedding_bag fwd+bwd sparse, N=2^14": (
        (1.1517, 0.0501), (1.2371, 0.0881), (1.2119, 0.0794), (1.1685, 0.0927),
        (1.1731, 0.0998), (1.1796, 0.0710), (1.1341, 0.0619), (1.1952, 0.0685),
        (1.1682, 0.0668), (1.2130, 0.0695)),
    "embedding_bag fwd, N=2^16": (
        (1.5135, 0.0390), (1.5456, 0.0690), (1.5446, 0.0515), (1.5349, 0.0332),
        (1.5890, 0.0588), (1.5669, 0.0538), (1.5350, 0.0552), (1.5193, 0.0529),
        (1.5584, 0.0397), (1.4797, 0.0512)),
    "embedding_bag fwd+bwd dense, N=2^16": (
        (1.1050, 0.1914), (1.0712, 0.1747), (1.0611, 0.1613), (0.9569, 0.1824),
        (1.0977, 0.1606), (1.1323, 0.1462), (1.0580, 0.1886), (1.0676, 0.1581),
        (1.0292, 0.1781), (1.0220, 0.1411)),
    "embedding_bag fwd+bwd sparse, N=2^16": (
        (0.9706, 0.0850), (1.0229, 0.1101), (1.0661, 0.0841), (1.0223, 0.0721),
        (1.0017, 0.1126), (1.0725, 0.0644), (1.0627, 0.0524), (1.0463, 0.0614),
        (0.9890, 0.1113), (1.0279, 0.0532)),
    "expert_ffn d=64": (
        (0.5052, 0.0335), (0.5152, 0.0348), (0.4926, 0.0367), (0.4557, 0.0719),
        (0.5505, 0.0738), (0.5020, 0.0233), (0.4546, 0.0278), (0.4581, 0.0403),
        (0.4822, 0.0371), (0.4850, 0.0320)),
    "expert_ffn d=128": (
        (0.4756, 0.0334), (0.4899, 0.0340), (0.4639, 0.0366), (0.4466, 0.0188),
        (0.4729, 0.0464), (0.4317, 0.0241), (0.4252, 0.0230), (0.4466, 0.0222),
        (0.4550, 0.0321), (0.4649, 0.0583)),
}
CASE_CALIBRATION_KEPT = len(CASE_CALIBRATION_SEEDS) - len(CASE_CALIBRATION_DROPPED)

#: faster_than_reference's cases (ci's) and the between-build sd each one's interval carries: the 95% upper bound on
#: its own, from this machine's calibration
CASE_RUN_SD = case_run_sd_upper(CASE_CALIBRATION_RUNS, CASE_CALIBRATION_ROUNDS)

#: The verdict builds of the present design, full ci builds of this chapter alone, one after another, each alone
#: under the machine's timing lock, as the builds printed them and the ledger recorded them: {bench seed: (verdict,
#: deciding case, its log speedup, 95% interval)} for faster_than_reference; `VERDICT_BUILD_LABELS`: {bench seed:
#: {claim: its verdict, with the preconditions that failed where one did}} for every claim of the appendix;
#: `VERDICT_BUILD_FOREIGN_SHARES`: {bench seed: the share of the machine's CPU time other processes took}. Seed 0
#: is the book's (CI builds it); 341 and 342 were never used. The notebook took 72.8, 68.2 and 65.0 s.
VERDICT_BUILDS = {
    0: ("reproduced", "expert_ffn d=128", 0.4559, 0.3888, 0.5230),
    341: ("reproduced", "expert_ffn d=64", 0.4594, 0.3588, 0.5601),
    342: ("reproduced", "expert_ffn d=64", 0.4996, 0.3984, 0.6008),
}
VERDICT_BUILD_LABELS = {
    0: {
        "faster_than_reference": "reproduced",
        "fp_quantize_near_copy_ceiling": "inconclusive (beyond_cache: the tensor fills 0.27 last-level caches)",
        "embedding_bag_beats_stock": "refuted (fwd+bwd at 2x the faster stock layout in 0 of 12 rounds)",
        "expert_ffn_beats_the_loop": "reproduced (every width at its target in 12 of 12 rounds)",
    },
    341: {
        "faster_than_reference": "reproduced",
        "fp_quantize_near_copy_ceiling": "inconclusive (beyond_cache: the tensor fills 0.27 last-level caches)",
        "embedding_bag_beats_stock": "refuted (fwd+bwd at 2x the faster stock layout in 0 of 12 rounds)",
        "expert_ffn_beats_the_loop": "reproduced (every width at its target in 12 of 12 rounds)",
    },
    342: {
        "faster_than_reference": "reproduced",
        "fp_quantize_near_copy_ceiling": "inconclusive (beyond_cache: the tensor fills 0.27 last-level caches)",
        "embedding_bag_beats_stock": "refuted (fwd+bwd at 2x the faster stock layout in 0 of 12 rounds)",
        "expert_ffn_beats_the_loop": "reproduced (every width at its target in 12 of 12 rounds)",
    },
}
VERDICT_BUILD_FOREIGN_SHARES = {0: 0.0128, 341: 0.0072, 342: 0.0057}


def label_repeats(labels: list[str]) -> str:
    """How one claim's labels over verdict builds agree: the same label in every build; the same verdict with other
    reasons (a label is the verdict, then its reason in parentheses); or not the same verdict in every build."""
    if len(set(labels)) == 1:
        return "the same in every build"
    if len({label.split(" (")[0] for label in labels}) == 1:
        return "the same verdict in every build"
    return "not the same verdict in every build"

REFERENCE_CASES = tuple(CASE_CALIBRATION_RUNS)


def case_key(case: str) -> str:
    """The measured key of a case's per-round log speedups over its reference on one thread."""
    return f"log_x_reference: {case}"


def case_logs(rows: list[dict], key: str, scale: str) -> dict[str, list[float]]:
    """Per calibrated case (`REFERENCE_CASES`), the logs of its per-round values `key` in `rows`, under
    `case_key`: at `CASE_CALIBRATION_SCALE` only, since elsewhere the cases are other workloads whose between-build
    sd was never measured (there, and for a case a run lacks, an empty list: that case decides nothing)."""
    logs = {f"{r['kernel']} {r['label']}": [math.log(v) for v in r[key]] for r in rows} if (
        scale == CASE_CALIBRATION_SCALE) else {}
    return {case_key(case): logs.get(case, []) for case in REFERENCE_CASES}


def deciding_case(record: dict) -> dict:
    """The effect (case) that decides faster_than_reference's record: for a refutation the refuted case with the
    lowest upper bound, otherwise the case with the lowest lower bound (the first one without an interval where
    some case has none: it is what keeps the claim undecided)."""
    effects = record["effects"]
    if record["verdict"] == REFUTED:
        return min((e for e in effects if e["verdict"] == REFUTED), key=lambda e: e["ci_high"])
    bare = [e for e in effects if e["ci_low"] is None or math.isnan(e["ci_low"])]
    return bare[0] if bare else min(effects, key=lambda e: e["ci_low"])



REFEREE_151 = {
    "seeds": (151, 152),
    "verdicts": ("inconclusive (quiet_machine: copy spread 0.393)", "reproduced"),
    "d128": ((0.264, 0.220, 0.308), (0.276, 0.238, 0.314)),
    "lowest_other": {"embedding_bag fwd+bwd sparse, N=2^16": ((0.594, 0.366, 0.822), (0.734, 0.525, 0.944))},
    "outputs_max_abs_diff": {"embedding_bag": 7.6e-6, "expert_ffn (relative)": 2e-7},
    "cpu_over_wall_one_thread": 1.00,
    "d128_x_fair_loop": (1.22, 0.201),
    "d128_x_stock_inplace_loop": 1.28,
    "coverage_at_7_df": 0.92,
    "ucb_lowest_lower_bound": 0.182,
    "d128_sd_to_flip": 0.085,
    "quiet_blocked_tight_runs": (2, 5),
}
"""A referee with no stake decided faster_than_reference as declared (7d230ec) on two bench seeds never used,
151 and 152 (every verdict build of the book used the notebook's seed 0), after the verdict builds were recorded;
the second redeclaration (`QUIET_ONE_THREAD`, `icml25.ops.bench.expert_sorted_loop`, `CASE_RUN_SD`) followed it and
answers it. Recorded as measured: expert_ffn d=128 decides on both, its log speedup and 95% interval
per seed in `d128`; seed 151 failed quiet_machine with every case's interval above the bar. Kernel and reference
give the same outputs on the timed inputs, and the kernel runs on one thread (CPU time over wall time). Against a
fairer expert loop than the reference (one argsort, one gather, one in-place index_add_) d=128 is 1.22x (log 0.201),
still above the bar: about a quarter of the margin is the reference's naivety. With s_c from 8 builds the interval's
coverage is about 0.92 instead of 0.95 (simulated); with a 95% upper bound on each s_c both seeds stay reproduced
(lowest lower bound `ucb_lowest_lower_bound`), and flipping d=128 needs an s_c of about `d128_sd_to_flip`. The
quiet_machine precondition reads the copy rounds of the two-thread pass, not the one-thread pass this claim reads:
it blocked 2 of 5 verdict-style runs whose one-thread intervals were tight."""

def moe_x_target(row: dict) -> list[float]:
    """Per round, the expert layer's speedup over the loop divided by its restated target
    min(MOE_X_LOOP, MOE_OF_CEILING * attainable), attainable being that round's GEMM ceiling over the loop: at
    least 1 when the kernel reaches MOE_X_LOOP times the loop or MOE_OF_CEILING of the ceiling."""
    return [s / min(MOE_X_LOOP, MOE_OF_CEILING * a) for s, a in zip(row["per_round_stock"],
                                                                     row["per_round_attainable"])]


def quartile_spread(times: list[float]) -> float:
    """(third quartile - first quartile) / median of a contender's round times: the noise of the middle rounds,
    which one preempted round does not move."""
    q1, q2, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return (q3 - q1) / q2


def measurements(rows: list[dict], repeats: int, scale: str) -> dict:
    """What the claims below are decided on, from the rows of `icml25.ops.bench.run` at `scale`: per sign-test
    effect, the binding case (`*_case`) and its per-round outcomes; per case of faster_than_reference, its per-round
    log speedups over the reference on one thread (`case_logs`); the medians over rounds of every case's value, and
    the cases measured that have no calibration at this scale, for the record."""
    fp = {r["label"]: r for r in rows if r["kernel"] == "fp_quantize"}
    blocked = [r for label, r in fp.items() if label != "no scaling"]
    timed_against_reference = [r for r in rows if r["kernel"] != "fp_quantize"]
    bag_forward = [r for r in rows if r["kernel"] == "embedding_bag" and r["label"].startswith("fwd,")]
    bag_steps = [r for r in rows if "per_round_best_stock" in r]
    moe = [dict(r, per_round_x_target=moe_x_target(r)) for r in rows if r["kernel"] == "expert_ffn"]
    effects = {
        "unscaled_at_ceiling": binding_case([fp["no scaling"]], "per_round_ceiling", UNSCALED_OF_CEILING),
        "blocked_at_ceiling": binding_case(blocked, "per_round_ceiling", BLOCKED_OF_CEILING),
        "bag_forward_beats_stock": binding_case(bag_forward, "per_round_stock", BAG_FORWARD_X_STOCK),
        "bag_step_beats_best_stock": binding_case(bag_steps, "per_round_best_stock", BAG_STEP_X_BEST_STOCK),
        "moe_meets_target": binding_case(moe, "per_round_x_target", 1.0),
    }
    out = {"rounds": repeats, "reference_rounds": min(len(r["per_round_one_thread"]) for r in timed_against_reference),
           "copy_quartile_spread": max(quartile_spread(r["copy_times"]) for r in fp.values()),
           "one_thread_copy_quartile_spread": quartile_spread(timed_against_reference[0]["one_thread_copy_times"]),
           "foreign_cpu_share": max(r["foreign_cpu_share"] for r in rows),
           "allocator_fixed": all(r["allocator_fixed"] for r in rows),
           "cache_multiple": min(r["cache_multiple"] for r in fp.values())}
    for name, (case, outcomes) in effects.items():
        out[name], out[f"{name}_case"] = outcomes, case
    out.update(case_logs(timed_against_reference, "per_round_one_thread", scale))
    measured = {f"{r['kernel']} {r['label']}" for r in timed_against_reference}
    out["uncalibrated_cases"] = sorted(measured - set(REFERENCE_CASES) if scale == CASE_CALIBRATION_SCALE
                                       else measured)
    out["median_x_reference"] = {f"{r['kernel']} {r['label']}": statistics.median(r["per_round_one_thread"])
                                 for r in timed_against_reference}
    out["moe_attainable_x_loop"] = [statistics.median(r["per_round_attainable"]) for r in moe]
    return out


ROUNDS = at_least("rounds", "rounds", MIN_ROUNDS, f"at least {MIN_ROUNDS} interleaved timing rounds")
ONE_THREAD_ROUNDS = at_least("rounds", "reference_rounds", MIN_ROUNDS,
                             f"at least {MIN_ROUNDS} interleaved timing rounds on one thread")
QUIET_MACHINE = Precondition("quiet_machine", f"the copy ceiling's rounds have an interquartile range within "
                             f"{QUIET:.0%} of their median", "copy_quartile_spread", lambda v: v <= QUIET)
QUIET_ONE_THREAD = Precondition(
    "quiet_one_thread_pass", f"the copy timed in the one-thread pass's own rounds has an interquartile range within "
    f"{QUIET:.0%} of its median (quiet_machine's bar, read on the pass this claim is decided on)",
    "one_thread_copy_quartile_spread", lambda v: v <= QUIET)
#: a niced process beside the benchmark slows every contender alike, which the rounds' spread misses
ALONE = ALONE_ON_THE_MACHINE
FIXED_ALLOCATOR = Precondition(
    "fixed_allocator", "the C allocator's policy was fixed before anything was timed, so that whether a block's "
    "pages are fresh does not depend on the process's allocation history (icml25.ops.bench.fix_allocator)",
    "allocator_fixed", bool)


def sign_test(name: str) -> Effect:
    """The effect `name`: the binding case's per-round 0/1 outcomes, whose share must exceed 1/2 (exact interval)."""
    return Effect(name, name, null=0.5, method="binomial")


def _rounds(at_bar: int, n: int = 12) -> list[float]:
    """Example outcomes: `at_bar` of `n` rounds at or above the bar."""
    return [1.0] * at_bar + [0.0] * (n - at_bar)


def _logs(speedup: float, n: int = 12) -> list[float]:
    """Example log speedups: `n` rounds scattered by 5% about `speedup`."""
    return [math.log(speedup) + 0.05 * (-1) ** r for r in range(n)]


#: a measurement every precondition of the claims below accepts
_OK = {"rounds": 12, "reference_rounds": 32, "copy_quartile_spread": 0.05, "one_thread_copy_quartile_spread": 0.0,
       "foreign_cpu_share": 0.01, "cache_multiple": 3.0, "allocator_fixed": True}

def _cases_at(speedup: float, **other: float) -> dict:
    """Example rounds for faster_than_reference: every case's 32 rounds at `speedup` (`_logs`), except the cases
    named in `other`, at their own."""
    return {case_key(c): _logs(other.get(c, speedup), 32) for c in REFERENCE_CASES}


FASTER_THAN_REFERENCE = Claim(
    chapter="kernels", id="faster_than_reference",
    paper_statement=f"The compiled embedding_bag and expert_ffn are faster than their pure-PyTorch references on "
                    f"every benchmarked case, forward and backward where they have one, each timed on one thread; "
                    f"the expert layer's reference is the sorted per-expert loop a competent PyTorch user writes "
                    f"(fp_quantize's reference is a dozen-pass loop that any one-pass kernel beats 50-100x, so its "
                    f"bar is the copy ceiling: the next claim)",
    paper_value="the book's promise of compiled kernels for the chapters' hot spots",
    criterion=f"Per case, on one thread, every case's kernel and reference in the same interleaved rounds: the mean "
              f"over the rounds of the log speedup over the reference, with a 95% t interval widened by a "
              f"{RUN_SD_CONFIDENCE:.0%} upper bound on that case's own between-build sd of its mean, measured on "
              f"calibration builds of the same pass at {CASE_CALIBRATION_SCALE} (CASE_RUN_SD); reproduced when "
              f"every case's interval lies above log {MARGIN} ({MARGIN - 1:.0%} faster), an intersection-union test "
              f"with no correction for the number of cases; refuted when any case's interval lies below; a case "
              f"with no calibration at the build's scale decides nothing",
    effects=[Effect(case, case_key(case), null=math.log(MARGIN), run_sd=CASE_RUN_SD[case] or None)
             for case in REFERENCE_CASES],
    preconditions=[ONE_THREAD_ROUNDS, QUIET_ONE_THREAD, ALONE, FIXED_ALLOCATOR],
    examples=(dict(_OK, **_cases_at(4.0)), dict(_OK, **_cases_at(4.0, **{REFERENCE_CASES[-1]: 0.3}))),
)

NEAR_THE_COPY_CEILING = Claim(
    chapter="kernels", id="fp_quantize_near_copy_ceiling",
    paper_statement=f"fp_quantize runs at {UNSCALED_OF_CEILING:.0%} or more of the copy ceiling without scaling and "
                    f"{BLOCKED_OF_CEILING:.0%} or more with blocks of 32, on a tensor several times the last-level "
                    "cache, both writing into a preallocated output",
    paper_value="the kernel's target: one pass over memory, blocked or not",
    criterion=f"Sign test over the interleaved rounds of the kernel's throughput over the copy's: the median is at "
              f"least {UNSCALED_OF_CEILING} unscaled and {BLOCKED_OF_CEILING} for every blocked case (each binding "
              f"case's share of rounds at its bar has an exact 95% interval above 1/2); refuted if below",
    effects=[sign_test("unscaled_at_ceiling"), sign_test("blocked_at_ceiling")],
    preconditions=[ROUNDS, QUIET_MACHINE, ALONE, FIXED_ALLOCATOR,
                   at_least("beyond_cache", "cache_multiple", MIN_CACHE_MULTIPLE,
                            f"the tensor fills at least {MIN_CACHE_MULTIPLE:g} last-level caches")],
    examples=(dict(_OK, unscaled_at_ceiling=_rounds(12), blocked_at_ceiling=_rounds(11)),
              dict(_OK, unscaled_at_ceiling=_rounds(1), blocked_at_ceiling=_rounds(11))),
)

EMBEDDING_BAG_BEATS_STOCK = Claim(
    chapter="kernels", id="embedding_bag_beats_stock",
    paper_statement=f"embedding_bag's forward is faster than stock F.embedding_bag, and its forward and backward "
                    f"at least {BAG_STEP_X_BEST_STOCK:g}x faster than the faster stock path (dense or sparse=True), "
                    "at every memory size benchmarked",
    paper_value="the kernel's target",
    criterion=f"Sign test per memory size over the interleaved rounds: the median speedup over stock is at least "
              f"{BAG_FORWARD_X_STOCK:g} for the forward, and that of the faster compiled gradient layout over the "
              f"faster stock one at least {BAG_STEP_X_BEST_STOCK:g} for forward + backward (each binding case's "
              "share of rounds at its bar has an exact 95% interval above 1/2); refuted if either lies below",
    effects=[sign_test("bag_forward_beats_stock"), sign_test("bag_step_beats_best_stock")],
    preconditions=[ROUNDS, QUIET_MACHINE, ALONE, FIXED_ALLOCATOR],
    examples=(dict(_OK, bag_forward_beats_stock=_rounds(12), bag_step_beats_best_stock=_rounds(10)),
              dict(_OK, bag_forward_beats_stock=_rounds(12), bag_step_beats_best_stock=_rounds(0))),
)

EXPERT_FFN_BEATS_THE_LOOP = Claim(
    chapter="kernels", id="expert_ffn_beats_the_loop",
    paper_statement=f"expert_ffn's forward and backward is at least {MOE_X_LOOP:g}x faster than the per-expert loop "
                    f"users write, or where that would lie beyond the machine's GEMM ceiling, runs at "
                    f"{MOE_OF_CEILING:.0%} of that ceiling, at every width benchmarked",
    paper_value=f"the kernel's target ({MOE_X_LOOP:g}x the loop), restated against the GEMM ceiling",
    criterion=f"Per width and round, the speedup over the loop over min({MOE_X_LOOP:g}, {MOE_OF_CEILING} x the "
              f"round's GEMM ceiling over the loop); sign test: every width's median is at least 1 (the binding "
              f"width's share of rounds at its target has an exact 95% interval above 1/2); refuted if below",
    effects=[sign_test("moe_meets_target")],
    preconditions=[ROUNDS, QUIET_MACHINE, ALONE, FIXED_ALLOCATOR],
    examples=(dict(_OK, moe_meets_target=_rounds(12)), dict(_OK, moe_meets_target=_rounds(3))),
)

CLAIMS = (FASTER_THAN_REFERENCE, NEAR_THE_COPY_CEILING, EMBEDDING_BAG_BEATS_STOCK, EXPERT_FFN_BEATS_THE_LOOP)


def target_reachable(row: dict) -> bool:
    """Whether MOE_X_LOOP times the loop lies within the GEMM ceiling at this width (the best round's rates)."""
    return row["attainable_x_stock"] >= MOE_X_LOOP


def restated_target(row: dict) -> float:
    """The expert layer's target at this width as a speedup over the loop: min(MOE_X_LOOP, MOE_OF_CEILING x the
    ceiling over the loop), from the best round's rates."""
    return min(MOE_X_LOOP, MOE_OF_CEILING * row["attainable_x_stock"])


#: expert_ffn's target at d=256, the issue's width, which only full times (`icml25 bench`, default scale full),
#: settled by measurement on this machine (issue 56): two runs of `icml25 bench --json`, one after another, each alone
#: under the machine's timing lock, as `icml25.ops.bench.expert_targets` printed them (the first ran before the
#: round-by-round fields were added). Per run: the share of the machine's CPU time other processes took, the GEMM
#: ceiling (GFLOP/s, the best of torch.mm over the layer's shapes and square ones) and its rate over the loop's
#: (attainable), the restated target min(MOE_X_LOOP, MOE_OF_CEILING x attainable), the kernel's
#: speedup over the loop (best rounds), the bound of the layer's own nine GEMMs at their shapes' rates, the outcome,
#: and, round by round as expert_ffn_beats_the_loop decides, the rounds at or above the target and the median of the
#: speedup over the target. On the machine before this one (the group B referee's audit) d=256 was blocked: its GEMM
#: ceiling, then one shape, was 1.37x the loop and the kernel 1.28x.
D256_BENCH_RUNS = (
    {"foreign_cpu_share": 0.0234, "gemm_ceiling_gflops": 334.2, "attainable_x_loop": 2.083, "target_x_loop": 1.5,
     "x_loop": 1.586, "own_gemm_x_loop": 1.952, "outcome": "met"},
    {"foreign_cpu_share": 0.0325, "gemm_ceiling_gflops": 345.5, "attainable_x_loop": 2.029, "target_x_loop": 1.5,
     "x_loop": 1.575, "own_gemm_x_loop": 1.919, "outcome": "met", "rounds_met": 12, "rounds": 12,
     "median_of_target": 1.059},
)
