"""``RolloutModule``: a :class:`PolicyModule` that trains on episodes it samples itself.

It owns what on-policy algorithms share: the problem stream, the environment and its sandbox,
the :class:`EpisodeRunner` and :class:`RolloutDataset`, pulling a fresh batch inside the step,
leaving samples the sandbox failed on out of the loss, and the rollout metrics and JSONL dumps.
GRPO and REINFORCE differ only in their advantages and loss.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torchmetrics import MeanMetric

from lit_codeRL.algorithms.grpo import zero_std_groups
from lit_codeRL.envs.settings import EnvSettings, make_env
from lit_codeRL.grading.repo import TAMPER_KINDS, tamper_kind
from lit_codeRL.policy.engine import SamplingParams
from lit_codeRL.rollout.dataset import RolloutDataset
from lit_codeRL.rollout.difficulty import DifficultyFilter
from lit_codeRL.rollout.episodes import EpisodeRunner
from lit_codeRL.rollout.prompts import ProblemSettings, ProblemStream, load_problem_set
from lit_codeRL.rollout.trajectory import TrajectoryBatch
from lit_codeRL.sandbox import SandboxConfig, make_sandbox
from lit_codeRL.training.policy_module import PolicyModule

if TYPE_CHECKING:  # imported where used: the gateway's server (aiohttp) only for env.name harness
    from lit_codeRL.rollout.harness import HarnessRunner


def context_limit(env_limit: int | None, max_new_tokens: int, engine_limit: int | None) -> int | None:
    """The episode runner's context cap (prompt + completion tokens): the env's, checked against
    the engine's own limit (vLLM's ``max_model_len``: it raises mid-rollout on a longer context,
    so the mismatch is a one-line error at setup); unset, the engine's."""
    if engine_limit is None:
        return env_limit
    from lit_codeRL.errors import ConfigError

    if max_new_tokens >= engine_limit:
        raise ConfigError(
            f"sampling.max_new_tokens {max_new_tokens} leaves no room for a prompt in "
            f"engine.max_model_len {engine_limit}: raise engine.max_model_len"
        )
    if env_limit is not None and env_limit > engine_limit:
        raise ConfigError(
            f"env.max_context_tokens {env_limit} exceeds engine.max_model_len {engine_limit}: "
            "lower the one or raise the other"
        )
    return engine_limit if env_limit is None else env_limit


class RolloutModule(PolicyModule):
    """Base of on-policy rollout algorithms; see the module docstring.

    Subclasses pass their rollout settings to ``super().__init__`` along with
    :class:`PolicyModule`'s, and in ``training_step`` call :meth:`next_batch`, compute advantages
    and the loss, and end with :meth:`log_rollout`.
    """

    supports_sequence_parallel = True

    def __init__(
        self,
        *,
        problems: ProblemSettings,
        env: EnvSettings,
        sandbox: SandboxConfig,
        sampling: SamplingParams,
        num_generations: int,
        prompts_per_step: int,
        filter_zero_std_groups: bool = False,
        max_refill_rounds: int = 3,
        seed: int = 0,
        **policy_kwargs: Any,
    ) -> None:
        super().__init__(**policy_kwargs)
        self.problem_settings, self.env_settings = problems, env
        self.sandbox_config, self.sampling = sandbox, sampling
        self.num_generations, self.prompts_per_step = num_generations, prompts_per_step
        self.filter_zero_std_groups, self.max_refill_rounds = filter_zero_std_groups, max_refill_rounds
        self.rollout_seed = seed
        self.reward_mean = MeanMetric()
        self.pass_rate = MeanMetric()
        self.dataset: RolloutDataset | None = None
        self.runner: HarnessRunner | None = None
        self.sandbox = None
        self.env: Any = None

    # ------------------------------------------------------------------ data
    def setup(self, stage: str) -> None:
        if stage != "fit" or self.dataset is not None:
            return
        self.sandbox = make_sandbox(self.sandbox_config) if self.env_settings.needs_sandbox else None
        env = self.env = make_env(self.env_settings, self.sandbox, self.problem_settings.num_shown_tests)
        rank = self.trainer.global_rank if self._trainer is not None else 0
        problems = load_problem_set(self.problem_settings)
        agent_env = self.env_settings.name == "harness"  # runs SWE and debugging tasks alike
        for kind, env_name in (("swe_task", "swe"), ("debug_task", "debug")):
            if (
                not agent_env
                and self.env_settings.name != env_name
                and any(kind in p.metadata for p in problems)
            ):
                from lit_codeRL.errors import ConfigError

                raise ConfigError(
                    f"problems.source {self.problem_settings.source!r} holds {env_name} tasks: "
                    f"set env.name: {env_name}"
                )
        validate = getattr(env, "validate_problems", None)
        if validate is not None:  # SWE: every task's reference patch must resolve it
            problems = validate(problems)
            if not problems:
                from lit_codeRL.errors import ConfigError

                raise ConfigError("no task left after validation (see the warnings above)")
        stream = ProblemStream(problems, seed=self.rollout_seed, rank=rank)
        max_context = context_limit(
            self.env_settings.max_context_tokens,
            self.sampling.max_new_tokens,
            getattr(self.engine, "max_model_len", None),
        )
        runner: Any
        if agent_env:  # the agent program drives; the gateway answers it from this engine
            from lit_codeRL.rollout.harness import HarnessRunner

            runner = self.runner = HarnessRunner(self.engine, env, self.sampling, max_context)
        else:
            runner = EpisodeRunner(
                self.engine,
                env,
                self.sampling,
                max_turns=self.env_settings.max_turns,
                max_context_tokens=max_context,
                system_prompt=self.problem_settings.system_prompt,
            )
        self.dataset = RolloutDataset(
            stream,
            runner,
            self.num_generations,
            self.prompts_per_step,
            filter_zero_std_groups=self.filter_zero_std_groups,
            max_refill_rounds=self.max_refill_rounds,
            seed=self.rollout_seed + 7919 * rank,
            difficulty=DifficultyFilter(self.problem_settings.difficulty, seed=self.rollout_seed + 31 * rank)
            if self.problem_settings.difficulty.enabled
            else None,
        )
        self.register_state("rollout", self.dataset)
        self.setup_run_dir("rollouts")

    def teardown(self, stage: str) -> None:
        super().teardown(stage)  # the engines
        if getattr(self, "runner", None) is not None:  # the harness's gateway
            self.runner.close()
            self.runner = None
        close_env = getattr(getattr(self, "env", None), "close", None)
        if close_env is not None:  # the SWE env's workspaces
            close_env()
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None

    def next_batch(self, dataloader_iter: Any) -> TrajectoryBatch:
        """A fresh rollout batch on this device, samples without a reward out of the loss.

        Pulling the batch here (instead of receiving it in ``training_step``) disables
        Lightning's one-batch prefetch, so every rollout comes from the policy after the
        previous update."""
        batch = None
        if self.runner is not None:  # an agent program's calls are stamped with the step they sample at
            self.runner.policy_version = self.global_step
        if self.sp_group is None or self.global_rank == self.sp_leader:
            item = next(dataloader_iter)
            batch = item[0] if isinstance(item, tuple) else item
        if self.sp_group is not None:
            # context parallelism: the group splits its first rank's rows along the sequence;
            # the other ranks generate nothing
            import torch.distributed as dist

            box = [batch.to("cpu") if batch is not None else None]
            dist.broadcast_object_list(box, src=self.sp_leader, group=self.sp_group)
            batch = box[0]
        batch = batch.to(self.device)
        batch.stats["sandbox_errors"] = float(batch.drop_invalid_from_loss())
        return batch

    # ------------------------------------------------------------------ logging
    def log_rollout(
        self, batch: TrajectoryBatch, stats: dict[str, list[float]], times: dict[str, float]
    ) -> None:
        """Rollout, loss and timing metrics (documented in docs/metrics.md) and the JSONL dump."""
        # one entry per episode: an agent program's extra rows (``rollout/harness.py``) repeat it
        first = torch.tensor([not r.get("extra_row") for r in batch.records], dtype=torch.bool)
        records = [r for r in batch.records if not r.get("extra_row")]
        valid = (
            batch.valid.cpu() if batch.valid is not None else torch.ones(batch.batch_size, dtype=torch.bool)
        )[first]
        rewards = batch.rewards.cpu()[first]
        passed = torch.tensor([r["verdict"] == "passed" for r in records], dtype=torch.float32)
        # torchmetrics sync across ranks in compute(), so every rank logs the same global value.
        for name, metric, values in (
            ("train/reward", self.reward_mean, rewards[valid]),
            ("train/pass_rate", self.pass_rate, passed[valid]),
        ):
            if values.numel():
                metric.update(values.to(self.device))
            self.log(
                name,
                metric.compute(),
                on_step=True,
                prog_bar=name == "train/reward",
                batch_size=batch.batch_size,
            )
            metric.reset()
        lengths = torch.tensor([r["completion_tokens"] for r in records], dtype=torch.float32)
        gen_s = batch.stats.get("generate_s", 0.0)
        difficulty = {f"train/{k}": v for k, v in batch.stats.items() if k.startswith("difficulty_")}
        zero_std = (
            float(zero_std_groups(rewards, self.num_generations, valid).float().mean())
            if len(records) % self.num_generations == 0
            else 0.0
        )
        metrics = {
            **difficulty,
            "train/reward_std": float(rewards[valid].std()) if int(valid.sum()) > 1 else 0.0,
            "train/frac_zero_std_groups": zero_std,
            "train/groups_with_signal": 1.0 - zero_std,
            "train/completion_length": float(lengths.mean()),
            "train/truncated_frac": float(1 - sum(r["finished"] for r in records) / len(records)),
            "train/tokens_per_s": batch.stats.get("completion_tokens", 0.0) / max(gen_s, 1e-9),
            "train/sandbox_s": float(sum(r["sandbox_s"] for r in records)),
            "sandbox/errors": batch.stats.get("sandbox_errors", 0.0),
            "time/generate_s": gen_s,
            "time/reward_wait_s": batch.stats.get("reward_wait_s", 0.0),
            # the whole rollout's wall time: what generation and the reward wait leave out (an
            # agent env's workspaces opened and graded, refill rounds) is the difference
            "time/rollout_s": batch.stats.get("rollout_s", 0.0),
            **(
                {
                    "time/env_reset_s": batch.stats["env_reset_s"],
                    "time/env_finish_s": batch.stats["env_finish_s"],
                }
                if "env_reset_s" in batch.stats
                else {}
            ),
            "train/lr": self.optimizers().param_groups[0]["lr"],
            **times,
        }
        if self.env_settings.max_turns > 1:
            metrics.update(turn_metrics(records, self.env_settings.max_turns))
        metrics.update(grade_metrics(records))
        commands = [r["num_commands"] for r in records if "num_commands" in r]
        if commands:  # agent envs: shell commands per episode and their time
            metrics["train/num_commands"] = sum(commands) / len(commands)
            metrics["train/command_s"] = sum(
                r.get("command_s", 0.0) for r in records if "num_commands" in r
            ) / len(commands)
        for key, values in stats.items():
            metrics[f"train/{key}"] = sum(values) / len(values)
        self.log_dict(metrics, on_step=True, batch_size=batch.batch_size)
        self.last_records = records
        if self.writer is not None:
            self.writer.write(batch.records, step=self.global_step, rank=self.global_rank)


GRADE_VERDICTS = (
    "resolved", "unresolved", "tamper", "rejected", "patch_failed", "test_patch_failed",
    "no_results", "timeout", "infra_error", "workspace_broken",
)  # fmt: skip
"""Verdicts of a graded agent episode (``grading/repo.py``, ``envs/workspace_episodes.py``)."""


def grade_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    """Agent envs (episodes graded from their diff): the share of each verdict among the graded
    episodes, every step (``train/grade/<verdict>``; ``train/grade/tamper_rate`` and one
    ``train/grade/tamper_<kind>`` per reason kind, so a policy that starts to hack shows at
    once), and how episodes left the loss or failed by the agent's own doing: masked for the
    infrastructure (``train/episodes/masked``) or graded ``workspace_broken``
    (``train/episodes/agent_fault``). Empty for envs that grade no diffs."""
    graded = [r["grade"] for r in records if isinstance(r.get("grade"), dict)]
    if not graded and not any("instance_id" in r for r in records):
        return {}
    n = max(len(graded), 1)
    out = {f"train/grade/{v}": sum(g.get("verdict") == v for g in graded) / n for v in GRADE_VERDICTS}
    out["train/grade/tamper_rate"] = out["train/grade/tamper"]
    for kind in (*(k.replace(" ", "_") for k in TAMPER_KINDS), "other"):
        hits = sum(kind in {tamper_kind(t) for t in g.get("tamper") or ()} for g in graded)
        out[f"train/grade/tamper_{kind}"] = hits / n
    out["train/episodes/masked"] = sum(not r.get("valid", True) for r in records) / len(records)
    out["train/episodes/agent_fault"] = sum(bool(r.get("agent_fault")) for r in records) / len(records)
    return out


def turn_metrics(records: list[dict[str, Any]], max_turns: int) -> dict[str, float]:
    """Multi-turn metrics: ``train/success_after_turn_k`` (fraction of valid episodes solved
    within k turns, the same episodes for every k) and ``train/num_turns``."""
    valid = [r for r in records if r.get("valid", True)]
    if not valid:
        return {}
    out = {"train/num_turns": sum(r["num_turns"] for r in valid) / len(valid)}
    for k in range(1, max_turns + 1):
        solved = sum(1 for r in valid if r.get("success_turn") is not None and r["success_turn"] <= k)
        out[f"train/success_after_turn_{k}"] = solved / len(valid)
    return out
