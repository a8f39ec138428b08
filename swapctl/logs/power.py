"""How small a change can an experiment see? The resolving power of the verdict's own test, from the data.

A `~` ("no change") means nothing unless it says what change would have shown. Here that is found by
simulation from the baseline's own values, not from a normal approximation: both sides are drawn with
replacement from the baseline (so they share its spread, its ties and its tail), the second side is scaled
by (1 + d), and the verdict's rule (Mann-Whitney p < ALPHA and the medians apart by more than what the log
prints, swapctl.logs.stats) is applied. The power at d is the share of draws it calls significant; the
resolution is the smallest |d| whose power reaches POWER, for a decrease and an increase alike (the larger
of the two). The same draws serve every d (common random numbers), so the power rises with |d| and a
bisection finds the edge; a fixed seed makes the figure reproducible.

The simulated rule is the verdict's whole rule, the bootstrap interval of the median change included:
without it (the U test alone, which uses every value where the interval uses only medians) the stated
power was 0.35 where 0.8 was claimed. tests/test_power.py checks the stated power against the verdict's
own `compare()` on fresh draws.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from .stats import ALPHA, MIN_N, RESOLUTION, mann_whitney_p, median

POWER = 0.8
SIMS = 200
RESAMPLES = 400  # bootstrap medians a side and draw (the verdict takes 2,000: the same interval, noisier)
MAX_CHANGE = 1.0  # 100%: a change larger than that is not "small"; past it the answer is None


@dataclass(frozen=True)
class Draw:
    """One simulated experiment: a resample of the baseline a side (the second not yet scaled), and the ends
    of the verdict's 95% interval of the bootstrap median ratio after / before. Scaling the second side by
    k = 1 + d scales its median and its bootstrap medians alike, so each change (a*k - b) / b is k*(a/b) - 1:
    the interval's ends are k*q_low - 1 and k*q_high - 1 (k > 0 keeps the order), and one draw serves every d."""

    before: tuple[float, ...]
    after: tuple[float, ...]
    median_before: float
    median_after: float
    q_low: float | None  # the interval's ends of the ratios a/b, before any scaling; None: no ratio
    q_high: float | None

    @classmethod
    def of(cls, before: list[float], after: list[float], boot_before: Sequence[float],
           boot_after: Sequence[float]) -> Draw:
        q = sorted(a / b for a, b in zip(boot_after, boot_before, strict=True) if b)
        ends = (q[int(0.025 * (len(q) - 1))], q[int(0.975 * (len(q) - 1))]) if q else (None, None)
        return cls(tuple(before), tuple(after), median(before), median(after), *ends)

    def significant(self, change: float, alpha: float = ALPHA) -> bool:
        """The verdict's rule (stats.Change.significant_at) when the second side is scaled by 1 + change."""
        k = 1 + change
        if abs(self.median_after * k - self.median_before) <= RESOLUTION or not self.median_before:
            return False
        if self.q_low is None or self.q_high is None or not (k * self.q_low > 1 or k * self.q_high < 1):
            return False  # the interval holds 0
        return mann_whitney_p(self.before, [v * k for v in self.after]) < alpha


@dataclass(frozen=True)
class Draws:
    """SIMS simulated experiments of n_before and n_after values, drawn with replacement from one baseline."""

    draws: tuple[Draw, ...]

    @classmethod
    def of(cls, values: Sequence[float], n_before: int, n_after: int, sims: int = SIMS, seed: int = 1,
           resamples: int = RESAMPLES) -> Draws:
        rng = random.Random(seed)

        def boot(side: list[float]) -> tuple[float, ...]:
            return boot_medians(sorted(side), resamples, rng)

        out = []
        for _ in range(sims):
            b, a = rng.choices(values, k=n_before), rng.choices(values, k=n_after)
            out.append(Draw.of(b, a, boot(b), boot(a)))
        return cls(tuple(out))

    def power(self, change: float, alpha: float = ALPHA) -> float:
        """The share of draws the verdict's rule calls significant when the second side is scaled by 1 + change."""
        return sum(d.significant(change, alpha) for d in self.draws) / len(self.draws)


def boot_medians(s: Sequence[float], resamples: int, rng: random.Random) -> tuple[float, ...]:
    """`resamples` medians of resamples (with replacement) of the sorted values `s`, drawn exactly and in O(1)
    each: a resample is n uniform indices, and its median sits at their middle order statistics, the k-th
    smallest of n uniforms being Beta(k, n + 1 - k) (the next one above it, the least of the n - k above)."""
    n = len(s)
    k = (n + 1) // 2
    out = []
    for _ in range(resamples):
        u = rng.betavariate(k, n + 1 - k)
        lo = s[min(n - 1, int(u * n))]
        if n % 2:
            out.append(lo)
        else:
            v = u + (1 - u) * rng.betavariate(1, n - k)
            out.append((lo + s[min(n - 1, int(v * n))]) / 2)
    return tuple(out)


def _edge(draws: Draws, sign: int, power: float, alpha: float = ALPHA, steps: int = 12) -> float | None:
    """The smallest |d| (for d of this sign) whose power reaches `power`, to 1/2^steps of MAX_CHANGE."""
    if draws.power(sign * MAX_CHANGE * (0.9 if sign < 0 else 1), alpha) < power:
        return None
    lo, hi = 0.0, MAX_CHANGE * (0.9 if sign < 0 else 1)  # a decrease of 100% is no time at all
    for _ in range(steps):
        mid = (lo + hi) / 2
        if draws.power(sign * mid, alpha) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def resolution(baseline: Sequence[float], n_after: int, n_before: int | None = None, power: float = POWER,
               sims: int = SIMS, seed: int = 1, alpha: float = ALPHA) -> float | None:
    """The smallest relative change of the median (0.03 = 3%) that a window of `n_after` values against
    `baseline` would call significant with probability `power`; None with too few values, or when even a
    change of MAX_CHANGE would not show."""
    n_before = len(baseline) if n_before is None else n_before
    if len(baseline) < MIN_N or n_after < MIN_N or n_before < MIN_N:
        return None
    draws = Draws.of(baseline, n_before, n_after, sims, seed)
    down, up = _edge(draws, -1, power, alpha), _edge(draws, +1, power, alpha)
    return None if down is None or up is None else max(down, up)


def values_needed(baseline: Sequence[float], change: float, power: float = POWER, sims: int = SIMS,
                  seed: int = 1, limit: int = 100_000, alpha: float = ALPHA) -> int | None:
    """The fewest values a side needs (the baseline measured as long as the new build) to resolve a relative
    `change` (0.03 for 3%) with probability `power`, from the baseline's own spread; None when even `limit`
    values would not."""
    if len(baseline) < MIN_N or not change or below_print(baseline, change):
        return None

    def enough(n: int) -> bool:
        d = Draws.of(baseline, n, n, sims, seed)
        return d.power(-abs(change), alpha) >= power and d.power(abs(change), alpha) >= power

    hi = MIN_N
    while not enough(hi):
        if hi >= limit:
            return None
        hi = min(hi * 2, limit)
    lo = hi // 2  # not enough (or below MIN_N)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if mid >= MIN_N and enough(mid):
            hi = mid
        else:
            lo = mid
    return hi


def below_print(baseline: Sequence[float], change: float) -> bool:
    """Whether `change` moves the baseline's median by no more than what the log prints (RESOLUTION). The
    verdict's rule wants the medians apart by more than that; as both sides grow, their medians tend to the
    baseline's m and m * (1 + change), so no number of values reaches the power, and the search for one
    (doubling up to 100,000 values a side, 200 draws each) would only take long to say so."""
    return abs(change) * median(baseline) <= RESOLUTION


def proofs_needed(baseline: Sequence[float], change: float, values_per_proof: float, **kw: float) -> int | None:
    """`values_needed` in proofs: a partition phase gives `values_per_proof` values a proof."""
    n = values_needed(baseline, change, **kw)  # type: ignore[arg-type]
    return None if n is None or values_per_proof <= 0 else max(1, math.ceil(n / values_per_proof))
