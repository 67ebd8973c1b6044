"""What a policy-gradient loss is computed from, in the shared training layer: the reference
log-probs (micro-batched like the policy forward) and the loss normalisers."""

from __future__ import annotations

import torch


def test_reference_forward_runs_in_the_policy_micro_batches():
    """``beta > 0``: the reference log-probs of a 6-row batch come from forwards of
    ``micro_batch_size`` (2) rows, never ``[6, T, V]`` logits at once, and equal the
    whole-batch forward's."""
    from lit_codeRL.modules.reinforce import REINFORCEModule
    from lit_codeRL.policy.loading import ModelSettings
    from lit_codeRL.policy.logprobs import token_logprobs
    from tests.training.test_sampler_correction import _batch

    module = REINFORCEModule(
        model=ModelSettings(name_or_path="tiny-random"),
        beta=0.1,
        num_generations=2,
        micro_batch_size=2,
        save_hf_model=False,
    )
    reference = module._reference[0]
    batch = _batch(module, "reinforce")
    start = batch.first_trainable_position()
    rows: list[int] = []
    hook = reference.register_forward_pre_hook(
        lambda _, args, kwargs: rows.append(kwargs["input_ids"].size(0)), with_kwargs=True
    )
    try:
        got = module.reference_logprobs(batch, start)
        sizes, rows[:] = list(rows), []
        grouped = module.reference_logprobs(batch, start, group_size=2)  # prompt once per group
        grouped_sizes = list(rows)
    finally:
        hook.remove()
    assert sizes == [2, 2, 2]
    assert grouped_sizes == [1, 2, 1, 2, 1, 2]  # each micro-batch: its group's prompt, then 2 rows
    with torch.no_grad():
        whole, _ = token_logprobs(reference, batch.input_ids, batch.attention_mask, start)
    mask = batch.trainable_mask[:, start:].bool()
    assert got.shape == whole.shape == grouped.shape
    torch.testing.assert_close(got[mask], whole[mask])
    torch.testing.assert_close(grouped[mask], whole[mask], atol=1e-5, rtol=1e-5)


def test_dr_grpo_normaliser_keeps_the_rows_that_left_the_loss():
    """A sandbox-failed row leaves the loss (its mask is zeroed) but stays in Dr. GRPO's constant
    ``B``; the per-sequence mean of ``grpo`` averages over the rows still in the loss."""
    from lit_codeRL.modules.reinforce import REINFORCEModule
    from lit_codeRL.policy.loading import ModelSettings
    from tests.training.test_sampler_correction import _batch

    module = REINFORCEModule(model=ModelSettings(name_or_path="tiny-random"), num_generations=2)
    batch = _batch(module, "reinforce")
    batch.valid[1] = False
    assert batch.drop_invalid_from_loss() == 1
    tokens = float(batch.trainable_mask.sum())
    assert tokens == 3 + 5 + 6 + 3 + 4  # row 1's 4 tokens are out
    assert module.loss_normalisers(batch, "dr_grpo") == (6.0, tokens)
    assert module.loss_normalisers(batch, "grpo") == (5.0, tokens)
