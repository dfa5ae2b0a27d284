"""Agreement between annotators and intervals on rates (pure Python: the web process uses it).

- Cohen's kappa (Cohen 1960) for two annotators who labelled the same images:
  kappa = (p_o - p_e) / (1 - p_e), p_o the observed agreement, p_e = sum_k p1(k) p2(k).
- Fleiss' kappa (Fleiss 1971) for many annotators: per image i with n_i ratings and n_ij of them
  in category j, P_i = (sum_j n_ij^2 - n_i) / (n_i (n_i - 1)); P_bar the mean of P_i;
  p_j = sum_i n_ij / sum_i n_i; P_e = sum_j p_j^2; kappa = (P_bar - P_e) / (1 - P_e).
  With the same n for every image this is exactly Fleiss's statistic; images may have different
  numbers of ratings (at least 2), the usual extension.
- Wilson score interval (Wilson 1927) for a proportion k/n at confidence z:
  centre (p + z^2/2n) / (1 + z^2/n), half-width z / (1 + z^2/n) * sqrt(p(1-p)/n + z^2/4n^2).
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float | None:
    """Cohen's kappa of two paired label sequences; None when it is undefined (no pairs, or
    both annotators always used the same single label)."""
    if len(a) != len(b):
        raise ValueError(f"cohen_kappa needs paired labels, got {len(a)} and {len(b)}")
    n = len(a)
    if n == 0:
        return None
    p_o = sum(x == y for x, y in zip(a, b)) / n
    ca, cb = Counter(a), Counter(b)
    p_e = sum(ca[k] * cb[k] for k in ca) / (n * n)
    if p_e >= 1.0:
        return None
    return (p_o - p_e) / (1.0 - p_e)


def fleiss_kappa(items: Iterable[Sequence[Hashable]]) -> float | None:
    """Fleiss' kappa of per-image label lists (images with fewer than 2 labels are ignored);
    None when undefined (no such image, or a single category throughout)."""
    totals: Counter = Counter()
    p_sum, n_items, n_ratings = 0.0, 0, 0
    for labels in items:
        n_i = len(labels)
        if n_i < 2:
            continue
        counts = Counter(labels)
        p_sum += (sum(c * c for c in counts.values()) - n_i) / (n_i * (n_i - 1))
        totals.update(counts)
        n_items += 1
        n_ratings += n_i
    if n_items == 0:
        return None
    p_bar = p_sum / n_items
    p_e = sum((c / n_ratings) ** 2 for c in totals.values())
    if p_e >= 1.0:
        return None
    return (p_bar - p_e) / (1.0 - p_e)


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval for k successes in n trials (None when n is 0)."""
    if n <= 0:
        return None
    if not 0 <= k <= n:
        raise ValueError(f"wilson_interval needs 0 <= k <= n, got k={k}, n={n}")
    p = k / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def fleiss_kappa_from_sums(*, n_items: int, p_sum: float, totals: Mapping[Hashable, int]) -> float | None:
    """Fleiss' kappa from what a database can sum without sending the labels: the number of
    images with 2 or more labels, the sum over them of (sum of squared category counts - n_i) /
    (n_i (n_i - 1)), and each category's count over them. Equal to ``fleiss_kappa`` of the lists."""
    n_ratings = sum(totals.values())
    if n_items == 0 or n_ratings == 0:
        return None
    p_e = sum((c / n_ratings) ** 2 for c in totals.values())
    if p_e >= 1.0:
        return None
    return (p_sum / n_items - p_e) / (1.0 - p_e)


def cohen_kappa_from_table(table: Mapping[tuple[Hashable, Hashable], int]) -> float | None:
    """Cohen's kappa from the counts of (label of a, label of b) pairs; equal to ``cohen_kappa``
    of the paired sequences."""
    n = sum(table.values())
    if n == 0:
        return None
    p_o = sum(c for (x, y), c in table.items() if x == y) / n
    ca: Counter = Counter()
    cb: Counter = Counter()
    for (x, y), c in table.items():
        ca[x] += c
        cb[y] += c
    p_e = sum(ca[k] * cb[k] for k in ca) / (n * n)
    if p_e >= 1.0:
        return None
    return (p_o - p_e) / (1.0 - p_e)
