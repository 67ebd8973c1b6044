"""Micro-batches cut to their own longest row: the forward and backward skip the right-padding
columns no row of the micro-batch uses (half the completion tokens of an MBPP GRPO step were
such padding), and no value or gradient changes."""

from __future__ import annotations

import torch

from lit_codeRL.rollout.trajectory import TrajectoryBatch, pad_columns
from tests.training.test_sampler_correction import train_one_batch


def _widths(kind: str, monkeypatch, trim: bool, **kw) -> tuple[list[int], dict]:
    """One training step of ``kind`` on the hand-built batch; the width of every micro-batch the
    training forward ran on."""
    import lit_codeRL.training.policy_module as policy_module

    if not trim:
        monkeypatch.setattr(TrajectoryBatch, "trimmed", lambda self, start: self)
    widths: list[int] = []
    forward = policy_module.grouped_prompt_token_logprobs

    def record(model, input_ids, *args, **kwargs):
        widths.append(input_ids.size(1))
        return forward(model, input_ids, *args, **kwargs)

    monkeypatch.setattr(policy_module, "grouped_prompt_token_logprobs", record)
    run = train_one_batch(kind, **kw)
    monkeypatch.undo()
    return widths, run


def test_trimmed_cuts_every_per_token_tensor_to_the_longest_row():
    rows = 3
    batch = TrajectoryBatch(
        input_ids=torch.arange(rows * 8).view(rows, 8),
        attention_mask=torch.tensor(
            [[0, 1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 0, 0, 0, 0]]
        ),
        trainable_mask=torch.tensor(
            [[0, 0, 0, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 1, 0, 0, 0, 0]]
        ),
        old_logprobs=torch.randn(rows, 8),
        rewards=torch.zeros(rows),
        group_ids=torch.zeros(rows, dtype=torch.long),
        ref_logprobs=torch.randn(rows, 8 - 3),  # from column start = 3
        advantages=torch.ones(rows),  # per sequence: not a column tensor
    )
    cut = batch.trimmed(3)
    assert cut.input_ids.shape == (3, 6) and cut.trainable_mask.shape == (3, 6)
    assert torch.equal(cut.old_logprobs, batch.old_logprobs[:, :6])
    assert torch.equal(cut.ref_logprobs, batch.ref_logprobs[:, :3])
    assert torch.equal(cut.advantages, batch.advantages)
    assert cut.select([0, 2]).trimmed(3).input_ids.size(1) == 5  # rows 0 and 2 end at column 4
    assert batch.select([2]).trimmed(4).input_ids.size(1) == 5  # never narrower than start + 1
    assert batch.trimmed(0).input_ids.size(1) == 6
    full = TrajectoryBatch(**{**vars(batch), "attention_mask": torch.ones(rows, 8, dtype=torch.long)})
    assert full.trimmed(3) is full  # nothing to cut: the same batch
    assert torch.equal(pad_columns(cut.old_logprobs, 8)[:, 6:], torch.zeros(rows, 2))


def test_grpo_step_on_trimmed_micro_batches_has_the_untrimmed_gradient(monkeypatch):
    """Groups of two rows, completions 3-4 and 5-6 tokens: the short groups' forwards are two
    columns narrower than the batch, and the update is the one of full-width forwards."""
    trimmed_widths, trimmed = _widths("grpo", monkeypatch, trim=True)
    full_widths, full = _widths("grpo", monkeypatch, trim=False)
    width = trimmed["batch"].input_ids.size(1)
    assert full_widths and set(full_widths) == {width}
    assert sorted(trimmed_widths) == sorted([width - 2, width, width - 2])
    for name, grad in full["module"].grads[0].items():
        torch.testing.assert_close(trimmed["module"].grads[0][name], grad, atol=1e-6, rtol=1e-5)


def test_reference_log_probs_of_trimmed_micro_batches_come_back_at_full_width(monkeypatch):
    """``beta > 0``: the reference pass runs on the trimmed micro-batches too, and its log-probs
    are padded back to the batch's width, equal to the full-width pass on every trained token."""
    from lit_codeRL.modules.reinforce import REINFORCEModule
    from lit_codeRL.policy.loading import ModelSettings
    from tests.training.test_sampler_correction import _batch

    module = REINFORCEModule(
        model=ModelSettings(name_or_path="tiny-random"), beta=0.1, num_generations=2, micro_batch_size=2
    )
    batch = _batch(module, "reinforce")
    start = batch.first_trainable_position()
    trimmed = module.reference_logprobs(batch, start)
    monkeypatch.setattr(TrajectoryBatch, "trimmed", lambda self, start: self)
    full = module.reference_logprobs(batch, start)
    mask = batch.trainable_mask[:, start:].bool()
    assert trimmed.shape == full.shape == mask.shape
    torch.testing.assert_close(trimmed[mask], full[mask], atol=1e-6, rtol=1e-5)
