"""Evaluation as a job of its own: ``lit-coderl validate`` scores any policy on code problems.

    lit-coderl validate --config configs/eval_mbpp.yaml                      # embedded model, MBPP test
    lit-coderl validate --config configs/eval_mbpp.yaml \\
        --model.init_args.checkpoint runs/grpo_mbpp/version_0/checkpoints/last.ckpt
    lit-coderl validate --config configs/eval_mbpp.yaml --model.init_args.source humaneval

Lightning's ``validate`` is the loop that runs a model once over held-out data, so evaluation is
that subcommand with a module whose validation step is the evaluation: the ``Trainer`` brings the
devices, DDP, precision and the progress bar; the knobs and their defaults are
``MBPPEvalCallback``'s (one :class:`~lit_codeRL.rollout.evaluation.CodeEvalSettings`), and both
run the same functions (``rollout/evaluation.py``), so the metrics carry the same names
(``mbpp_eval/pass_rate``, ``mbpp_eval/problems_passed``, ...) and a standalone evaluation equals
the interval evaluation of a training run at the same weights.

The policy is any source the loader accepts (``model.name_or_path``: embedded, ``.gguf``, a
``save_pretrained`` directory, a hub id online) or a lit-coderl training checkpoint
(``checkpoint``: the run's model settings come from the checkpoint, LoRA included). Problems are
sharded over ranks (each rank its own slice, no padding duplicates) and generated in batches;
the progress bar (or, without a live one, a log line per batch) shows problems done, the running
pass rate and the ETA.

Where the config leaves them unset, ``$MBPP_DATASET_PATH`` gives the problem source and
``$MBPP_EVAL_NUM_QUESTIONS`` the number of problems (the original design's overrides; both
logged when used).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule

from lit_codeRL.callbacks.progress import EvalProgress
from lit_codeRL.envs.debug.env import DebugSettings
from lit_codeRL.envs.harness.env import HarnessSettings
from lit_codeRL.envs.swe.env import SWESettings
from lit_codeRL.envs.workspace_episodes import check_test_deps
from lit_codeRL.policy.engine import EngineSettings, make_engine
from lit_codeRL.policy.loading import ModelSettings, load_policy
from lit_codeRL.problems import Problem
from lit_codeRL.rollout.evaluation import (
    EVAL_TIME_PARTS,
    CodeEvalSettings,
    close_runner,
    code_eval_metrics,
    evaluate_problems,
    gather_results,
    make_eval_runner,
    running_pass_score,
)
from lit_codeRL.rollout.prompts import load_problem_set
from lit_codeRL.sandbox import SandboxConfig, make_sandbox
from lit_codeRL.training.policy_module import as_settings

log = logging.getLogger("lit_codeRL")

_D = CodeEvalSettings  # the one set of defaults, shared with MBPPEvalCallback


class ProblemBatches:
    """This rank's problems in batches; ``len`` = batches, so the progress bar has a total.

    The validation loop takes it as it is: as a ``DataLoader`` of a map-style dataset it would get
    a ``DistributedSampler`` under DDP (which re-shards the shard and pads with duplicates), and
    an ``IterableDataset`` with a length draws Lightning's warning about worker processes (there
    are none here)."""

    def __init__(self, problems: list[Problem], batch_size: int) -> None:
        self.batches = [problems[i : i + batch_size] for i in range(0, len(problems), batch_size)]

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class EvaluationModule(LightningModule):
    """Score a policy on code problems (``lit-coderl validate``; see the module docstring).

    Defaults: greedy pass@1 on MBPP test, as ``MBPPEvalCallback``
    (:class:`~lit_codeRL.rollout.evaluation.CodeEvalSettings` documents each knob).

    Args:
        model: The policy: any source the loader accepts.
        checkpoint: A lit-coderl training checkpoint (``.ckpt``) to evaluate instead of
            ``model``: its policy weights, built with the run's own model settings.
        engine: Generation engine.
        source: Problem source (``mbpp`` hub, a local MBPP file/dir, ``mbpp-sanitized`` layout,
            ``humaneval``, a seed-format JSON file, ``embedded``); unset: ``$MBPP_DATASET_PATH``,
            else ``mbpp``.
        split: Split (MBPP: ``test`` = task ids 11-510, ``validation``; embedded: ``eval``).
        limit: The first ``limit`` problems; unset: ``$MBPP_EVAL_NUM_QUESTIONS``, else all.
        n_samples: Completions per problem (pass@k with the unbiased estimator when > 1).
        k: The k of pass@k to report (each <= ``n_samples``).
        temperature: 0 = greedy (the pass@1 protocol).
        top_p: Nucleus mass when sampling.
        max_new_tokens: Completion length limit.
        batch_size: Problems generated together; unset: 16, or 4 on GPUs under 16 GiB.
        system_prompt: System message; ``None`` uses the model default (as in training).
        num_shown_tests: Tests shown in the prompt (MBPP protocol: the first).
        max_turns: 1 = one answer; more = code repair with feedback, pass rate per turn; the
            tool calls of a debugging episode (``source: debug``).
        debug: Debugging tasks: the gym's tools, time limits and grading (``env.debug``).
        swe: SWE tasks (``source: swe``): the SWE env's tools, time limits and grading (``env.swe``).
        harness: SWE or debugging tasks solved by an agent program through the gateway
            (``env.harness``; ``docs/gateway.md``); unset: the built-in action formats.
        sandbox: Sandbox for grading (isolating by default).
        output_dir: Where the per-problem JSON goes; default ``<log_dir>/mbpp_eval``.
    """

    def __init__(
        self,
        model: ModelSettings = ModelSettings(),  # noqa: B008 - dataclass defaults show up in --print_config
        checkpoint: str | None = None,
        engine: EngineSettings = EngineSettings(),  # noqa: B008
        source: str | None = _D.source,
        split: str = _D.split,
        limit: int | None = _D.limit,
        n_samples: int = _D.n_samples,
        k: list[int] | None = _D.k,
        temperature: float = _D.temperature,
        top_p: float = _D.top_p,
        max_new_tokens: int = _D.max_new_tokens,
        batch_size: int | None = _D.batch_size,
        system_prompt: str | None = _D.system_prompt,
        num_shown_tests: int = _D.num_shown_tests,
        max_turns: int = _D.max_turns,
        debug: DebugSettings = DebugSettings(),  # noqa: B008
        swe: SWESettings = SWESettings(),  # noqa: B008
        harness: HarnessSettings | None = None,
        sandbox: SandboxConfig = SandboxConfig(),  # noqa: B008
        output_dir: str | None = None,
    ) -> None:
        super().__init__()
        self.settings = CodeEvalSettings(
            source=source,
            split=split,
            limit=limit,
            n_samples=n_samples,
            k=k,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            system_prompt=system_prompt,
            num_shown_tests=num_shown_tests,
            max_turns=max_turns,
            debug=as_settings(DebugSettings, debug),
            swe=as_settings(SWESettings, swe),
            harness=as_settings(HarnessSettings, harness) if harness is not None else None,
        )
        self.save_hyperparameters()
        self.problem_settings = self.settings.problem_settings()
        self.k = self.settings.k_values()
        self.sampling = self.settings.sampling()
        self.batch_size = self.settings.generation_batch()
        self.sandbox_config = as_settings(SandboxConfig, sandbox)
        self.policy, self.tokenizer = load_policy(as_settings(ModelSettings, model), checkpoint)
        self.policy.eval().requires_grad_(False)
        self.engine = make_engine(as_settings(EngineSettings, engine), self.tokenizer, self.policy)
        self.sandbox = None
        self.runner = None
        self.results: list[dict[str, Any]] = []
        self.last_metrics: dict[str, float] = {}
        self._problems: list[Problem] | None = None
        self._log_dir: str | None = None
        self._start = 0.0
        self._times: dict[str, float] = {}
        self._progress: EvalProgress | None = None

    # ------------------------------------------------------------------ data
    def problems(self) -> list[Problem]:
        if self._problems is None:
            self._problems = load_problem_set(self.problem_settings)
        return self._problems

    def shard(self) -> list[Problem]:
        """This rank's problems: every ``world_size``-th from its rank on."""
        rank = self.trainer.global_rank if self._trainer is not None else 0
        world = self.trainer.world_size if self._trainer is not None else 1
        return self.problems()[rank::world]

    def val_dataloader(self) -> ProblemBatches:
        return ProblemBatches(self.shard(), self.batch_size)

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        return batch  # problems, not tensors: the engine puts its own tensors on the device

    def setup(self, stage: str) -> None:
        # trainer.log_dir is a collective under DDP: resolve it on every rank, here
        self._log_dir = self.trainer.log_dir if self._trainer is not None else None
        if self.sandbox is None:
            self.sandbox = make_sandbox(self.sandbox_config)

    def teardown(self, stage: str) -> None:
        close_runner(self.runner)
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None

    # ------------------------------------------------------------------ evaluation
    def on_validation_start(self) -> None:
        self.engine.sync_weights(self.policy)
        self.runner = make_eval_runner(
            self.engine,
            self.sandbox,
            self.sampling,
            self.hparams.max_turns,
            self.problem_settings.num_shown_tests,
            self.problem_settings.system_prompt,
            self.problem_settings.source,
            self.settings.debug,
            self.settings.swe,
            self.settings.harness,
        )
        grader = getattr(getattr(self.runner, "env", None), "grader", None)
        if grader is not None:  # agent tasks: their test_deps installed, or one line now
            check_test_deps(self.shard(), grader.workspace)
        self.results, self._start, self._times = [], time.perf_counter(), {}
        # a live validation bar gets the running pass rate in its description (its own columns
        # show batches done and the time left); without one (a pipe, a log file) a line per batch
        self._progress = EvalProgress(
            "evaluation", len(self.shard()), trainer=self._trainer, in_validation_bar=True
        )

    @torch.no_grad()
    def validation_step(self, batch: list[Problem], batch_idx: int) -> None:
        assert self.runner is not None
        results = evaluate_problems(self.runner, batch, self.hparams.n_samples, len(batch), stats=self._times)
        self.results += results
        if self._progress is not None:
            self._progress.advance(len(results), *running_pass_score(results))
        score, graded = running_pass_score(self.results)
        running = score / max(1, graded)
        # the rank-local running pass rate and problems done, for a TQDM bar (a Rich bar shows no
        # prog_bar metrics outside fit: EvalProgress writes them into its description)
        for name, value in (("pass_rate", running), ("problems", float(len(self.results)))):
            self.log(
                name, value, prog_bar=True, logger=False, on_step=True, on_epoch=False, batch_size=len(batch)
            )

    def on_validation_epoch_end(self) -> None:
        world = self.trainer.world_size if self._trainer is not None else 1
        order = {p.task_id: i for i, p in enumerate(self.problems())}  # the problem set's own order
        results = sorted(gather_results(self.results, world), key=lambda r: order[r["task_id"]])
        metrics = code_eval_metrics(results, self.k, self.hparams.max_turns)
        metrics["mbpp_eval/seconds"] = time.perf_counter() - self._start
        # where this rank's time went (a generate, the wait on env steps after it, opening and
        # closing workspaces): an agent evaluation on a GPU spends most of it outside the model
        for name in EVAL_TIME_PARTS:
            metrics[f"mbpp_eval/time/{name}"] = float(self._times.get(name, 0.0))
        self.last_metrics = metrics
        # the scores are identical on every rank after the gather, the times are each rank's own
        # (rank 0's are reported): no reduction
        self.log_dict(metrics, sync_dist=False, batch_size=1)
        if self._trainer is None or self.trainer.is_global_zero:
            self._report(results, metrics)

    def _report(self, results: list[dict[str, Any]], metrics: dict[str, float]) -> None:
        ps = self.problem_settings
        root = Path(self.hparams.output_dir or Path(self._log_dir or ".") / "mbpp_eval")
        root.mkdir(parents=True, exist_ok=True)
        out = root / f"{Path(str(ps.source)).name}_{ps.split}.json"
        out.write_text(
            json.dumps(
                {
                    "source": ps.source,
                    "split": ps.split,
                    "model": self.hparams.checkpoint or self.hparams.model,
                    "sampling": vars(self.sampling),
                    "metrics": metrics,
                    "problems": results,
                },
                indent=1,
                default=str,
            )
        )
        rows = [
            ("source / split", f"{ps.source} / {ps.split}"),
            ("problems", f"{int(metrics['mbpp_eval/num_problems'])}"),
            ("pass@1", f"{metrics['mbpp_eval/pass_rate']:.4f}"),
            ("problems passed", f"{int(metrics['mbpp_eval/problems_passed'])}"),
            *[
                (k.removeprefix("mbpp_eval/"), f"{v:.4f}")
                for k, v in metrics.items()
                if "pass@" in k or "turn_" in k
            ],
            ("sandbox errors", f"{int(metrics['mbpp_eval/sandbox_errors'])}"),
            ("wall time", f"{metrics['mbpp_eval/seconds']:.0f} s"),
            (
                "of which",
                ", ".join(f"{name} {metrics[f'mbpp_eval/time/{name}']:.0f} s" for name in EVAL_TIME_PARTS),
            ),
            ("per-problem results", str(out)),
        ]
        width = max(len(k) for k, _ in rows)
        print("\n".join(["", "| evaluation | |", "|---|---|", *[f"| {k:<{width}} | {v} |" for k, v in rows]]))

    def configure_optimizers(self) -> None:
        return None
