"""Annotator quality: the rules that flag a reviewer whose pace no person can sustain or whose
gold answers are too often wrong. Framework-free: the caller hands in each annotator's review
times and gold counts; the rules, their thresholds and the sentences that state them live here,
so the curator's dashboard and the annotator's home page say the same thing.

Pace. A decision needs the image, the OOD class and the classifier's top-5 to be looked at; at
``min_seconds`` (1.5 s) per image that is already 2,400 images an hour. An annotator with at
least ``min_timed`` timed reviews is flagged when their median time per image is below
``min_seconds``, when their images per hour (3600 x reviews / summed seconds) exceed
``3600 / min_seconds``, or when their median is below ``team_fraction`` (half) of the median of
the other annotators' medians (those with ``min_timed`` reviews too). 0.5 s per image (7,200 to
7,846 images an hour) is flagged by the first two.

Gold. Each gold review is a trial with a known answer; accuracy is k/n with its Wilson score
interval (Wilson 1927, as in ``pipelines.review.agreement.wilson_interval``). An annotator is flagged
when they have at least ``min_gold`` (5) gold answers and the interval's upper end is below
``gold_threshold`` (80%): with 95% confidence their accuracy is under it. (One wrong answer out
of one already has an upper end of 79%, hence the minimum.)
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from pipelines.review.agreement import wilson_interval


@dataclass(frozen=True)
class QualityRules:
    min_timed: int = 20
    min_seconds: float = 1.5
    team_fraction: float = 0.5
    gold_threshold: float = 0.8
    min_gold: int = 5

    @property
    def max_per_hour(self) -> float:
        return 3600.0 / self.min_seconds

    def statements(self) -> list[str]:
        """The rules in words, as the pages show them."""
        return [
            f"Too fast: at least {self.min_timed} timed reviews and a median under {self.min_seconds:g} s per image, "
            f"or more than {self.max_per_hour:,.0f} images per hour (3600 x reviews / summed seconds): "
            "nobody can look at the image, the class and the top-5 that fast.",
            f"Much faster than the team: a median under {self.team_fraction:.0%} of the median of the other annotators' "
            f"medians (those with {self.min_timed}+ timed reviews).",
            f"Low gold accuracy: at least {self.min_gold} gold answers and the Wilson 95% interval of the share answered right "
            f"lies wholly below {self.gold_threshold:.0%} (its upper end is under it).",
        ]


@dataclass(frozen=True)
class AnnotatorTimes:
    name: str
    seconds: Sequence[float]  # one per timed (non-gold) review
    gold: int = 0
    gold_correct: int = 0


@dataclass
class AnnotatorQuality:
    name: str
    reviews: int
    median_seconds: float | None
    per_hour: float | None
    team_median: float | None
    gold: int
    gold_correct: int
    gold_accuracy: float | None
    gold_ci: tuple[float, float] | None
    flags: list[str] = field(default_factory=list)

    @property
    def too_fast(self) -> bool:
        return any(f.startswith("fast") for f in self.flags)

    @property
    def low_gold(self) -> bool:
        return "gold" in self.flags


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(np.asarray(values, dtype=float))) if len(values) else None


def annotator_quality(annotators: Sequence[AnnotatorTimes], rules: QualityRules | None = None) -> list[AnnotatorQuality]:
    """Pace, gold accuracy and flags per annotator, in the order given. Flags: ``fast`` (below the
    absolute pace), ``fast_vs_team`` (below the team's), ``gold`` (low gold accuracy)."""
    rules = rules or QualityRules()
    medians = {a.name: _median(a.seconds) for a in annotators}
    timed = {a.name for a in annotators if len(a.seconds) >= rules.min_timed}
    out = []
    for a in annotators:
        n = len(a.seconds)
        total = float(np.sum(np.asarray(a.seconds, dtype=float))) if n else 0.0
        med = medians[a.name]
        others: list[float] = [m for b in timed if b != a.name and (m := medians[b]) is not None]
        team = _median(others) if others else None
        per_hour = 3600.0 * n / total if total > 0 else None
        flags = []
        if n >= rules.min_timed and med is not None:
            if med < rules.min_seconds or (per_hour is not None and per_hour > rules.max_per_hour):
                flags.append("fast")
            if team is not None and med < rules.team_fraction * team:
                flags.append("fast_vs_team")
        ci = wilson_interval(a.gold_correct, a.gold)
        if ci is not None and a.gold >= rules.min_gold and ci[1] < rules.gold_threshold:
            flags.append("gold")
        out.append(AnnotatorQuality(name=a.name, reviews=n, median_seconds=med, per_hour=per_hour, team_median=team,
                                    gold=a.gold, gold_correct=a.gold_correct,
                                    gold_accuracy=a.gold_correct / a.gold if a.gold else None, gold_ci=ci, flags=flags))
    return out
