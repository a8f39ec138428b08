"""Is a change real or noise? Two samples of one phase's times, compared the way Go's benchstat does.

- The change is that of the medians, with a 95% confidence interval from a bootstrap of the median
  difference (resampling each side with replacement; a fixed seed, so a verdict is reproducible).
- Significance from the Mann-Whitney U test (two-sided, normal approximation with tie correction):
  no assumption that the times are normally distributed, which GPU phase times are not.
- A change is significant when p < ALPHA, the interval excludes 0 and the medians differ by more than
  RESOLUTION (cuzk prints whole milliseconds: a median that moves from 5 to 6 ms under a busier machine
  is the print's rounding, not the build); otherwise it is noise (`~`).
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

ALPHA = 0.05
RESAMPLES = 2000
MIN_N = 4  # fewer values a side: no verdict
RESOLUTION = 1.0  # ms: what the logs print


@dataclass(frozen=True)
class Change:
    """One phase, before against after."""

    n_before: int
    n_after: int
    median_before: float
    median_after: float
    spread_before: float  # 95% CI half-width of the median, as a fraction of it (benchstat's ±)
    spread_after: float
    delta: float | None  # (after - before) / before, of the medians
    low: float | None  # the 95% interval of delta
    high: float | None
    p: float | None  # Mann-Whitney U, two-sided
    alpha: float = ALPHA  # the level the U test's p is held to (ALPHA / looks in a sequential window)
    mean_before: float | None = None  # what a phase whose median before is 0 (mostly-0 waits) is read by
    mean_after: float | None = None

    @property
    def significant(self) -> bool:
        return self.significant_at(self.alpha)

    def significant_at(self, alpha: float) -> bool:
        """The rule at another level for the U test's p (a look of a sequential window takes ALPHA / looks);
        the interval stays the 95% one."""
        return (self.p is not None and self.p < alpha and self.low is not None and self.high is not None
                and (self.low > 0 or self.high < 0) and abs(self.median_after - self.median_before) > RESOLUTION)

    def line(self, name: str, unit: str = "ms") -> str:
        """`ntt_kernels  182ms ± 3%  70ms ± 2%  -61.5% (p=0.000 n=40+40)`, `~` where it is noise."""
        before = f"{_num(self.median_before)}{unit} ± {self.spread_before * 100:.0f}%"
        after = f"{_num(self.median_after)}{unit} ± {self.spread_after * 100:.0f}%"
        n = f"n={self.n_before}+{self.n_after}"
        if self.p is None:
            side = "before" if self.n_before < MIN_N else "after"
            return f"{name}  {before}  {after}  ? ({n}: too few values {side}, {MIN_N} needed)"
        if self.delta is None:  # a median of 0 before: no change in %, but thousands of values say something
            return (f"{name}  {before}  {after}  median 0 before: mean {_num(self.mean_before or 0)}{unit} -> "
                    f"{_num(self.mean_after or 0)}{unit} (p={self.p:.3f} {n})")
        change = f"{self.delta * 100:+.1f}%" if self.significant else "~"
        return f"{name}  {before}  {after}  {change} (p={self.p:.3f} {n})"


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 10 else f"{v:.2g}"


def median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    return (s[(n - 1) // 2] + s[n // 2]) / 2


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p of the Mann-Whitney U test, normal approximation with tie correction."""
    n1, n2 = len(a), len(b)
    n = n1 + n2
    pooled = sorted([*a, *b])
    rank: dict[float, float] = {}  # a value's mean rank among the pooled values
    ties, i = 0.0, 0
    while i < n:
        j = bisect_right(pooled, pooled[i], i)
        rank[pooled[i]] = (i + j + 1) / 2  # the mean of ranks i+1 .. j
        ties += (j - i) ** 3 - (j - i)
        i = j
    u = sum(map(rank.__getitem__, a)) - n1 * (n1 + 1) / 2
    sigma2 = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if sigma2 <= 0:
        return 1.0  # every value the same
    z = (abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(sigma2)  # with continuity correction
    return max(0.0, min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2))))


def _bootstrap(values: Sequence[float], rng: random.Random, resamples: int) -> list[float]:
    """Medians of `resamples` resamples of `values`, drawn in O(1) each from the order statistics' law
    (power.boot_medians: the same distribution as resampling, without building n values a draw)."""
    from .power import boot_medians

    return list(boot_medians(sorted(values), resamples, rng))


def _interval(draws: list[float]) -> tuple[float, float]:
    s = sorted(draws)
    return s[int(0.025 * (len(s) - 1))], s[int(0.975 * (len(s) - 1))]


def compare(before: Sequence[float], after: Sequence[float], seed: int = 1, resamples: int = RESAMPLES,
            alpha: float = ALPHA) -> Change:
    """The change of the medians from `before` to `after`, with its interval and significance at `alpha`."""
    rng = random.Random(seed)
    mb = median(before) if before else math.nan
    ma = median(after) if after else math.nan
    means = (sum(before) / len(before) if before else None, sum(after) / len(after) if after else None)
    if len(before) < MIN_N or len(after) < MIN_N:
        return Change(len(before), len(after), mb, ma, 0.0, 0.0, None, None, None, None, alpha, *means)
    boot_b, boot_a = _bootstrap(before, rng, resamples), _bootstrap(after, rng, resamples)
    spread = [(hi - lo) / 2 / abs(m) if m else 0.0 for (lo, hi), m in
              ((_interval(boot_b), mb), (_interval(boot_a), ma))]
    delta = (ma - mb) / mb if mb else None
    low = high = None
    if mb:
        ratios = [(a - b) / b for a, b in zip(boot_a, boot_b, strict=False) if b]
        if ratios:
            low, high = _interval(ratios)
    return Change(len(before), len(after), mb, ma, spread[0], spread[1], delta, low, high,
                  mann_whitney_p(before, after), alpha, *means)


def moves(before: Sequence[float], after: Sequence[float], alpha: float = ALPHA) -> bool:
    """`compare(before, after).significant_at(alpha)`, with the bootstrap drawn only where the cheap parts
    of the rule (enough values, the medians apart by more than RESOLUTION, the U test's p) already hold:
    the same answer, and under no change (most looks of a sequential window) ~20x sooner."""
    if len(before) < MIN_N or len(after) < MIN_N or abs(median(after) - median(before)) <= RESOLUTION:
        return False
    return mann_whitney_p(before, after) < alpha and compare(before, after).significant_at(alpha)
