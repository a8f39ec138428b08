"""`swapctl experiment`: a build (B) tried on one host against the build that runs there, with a verdict.

judge.py says what changed (pure: two sets of parsed runs and GPU samples in, a Verdict out), window.py
holds the evidence as it is fetched, run.py runs the experiment with the caller's hooks (the CLI's
`swapctl experiment` passes its terminal's), report.py writes the HTML."""

from .judge import (
    HEADLINE,
    LOOKS,
    MIN_PROOFS,
    Need,
    Side,
    Verdict,
    enough,
    headline,
    moved,
    need,
    resolutions,
    side,
    verdict,
    withhold,
    without_warmup,
)

__all__ = ["HEADLINE", "LOOKS", "MIN_PROOFS", "Need", "Side", "Verdict", "enough", "headline", "moved", "need",
           "resolutions", "side", "verdict", "withhold",
           "without_warmup"]
