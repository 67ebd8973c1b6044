"""``DQNModule``: a Q-network writes Python functions token by token (``CodeGenerationEnv``).

One training step: the ``ReplayDataset`` steps ``num_envs`` envs with the live online network
(ε-greedy over the env's action mask) and stores the transitions, then hands over a replay batch;
``training_step`` computes the (Double) DQN target with the target network and a Huber loss
(importance-weighted under prioritized replay); every ``target_sync_every`` optimizer steps the
target network copies the online one. ε follows its schedule in *environment* steps. Each greedy
evaluation (``greedy_eval_every``) can refocus exploration on the problems the greedy policy still
fails: more episodes on them (``solved_problem_weight``) and a higher ε there (``unsolved_epsilon``).

Everything that shapes the next step is checkpointed (``on_save_checkpoint``), per rank: the replay
buffer and its sampling RNG, the collector (env step count that drives ε, episode stats, RNG), every
env's episode state and the global RNG streams, so ``fit(ckpt_path=...)`` continues the run exactly
(``tests/training/test_resume.py``). ``trainer.test(module)`` (``lit-coderl test``) runs the
greedy policy on the training and held-out problems and prints per-problem success and code.

Reference shapes: Lightning's ``reinforce_learn_Qnet.py`` and CleanRL's ``dqn.py``; Double DQN
(van Hasselt et al. 2016), dueling heads (Wang et al. 2016), prioritized replay (Schaul et al. 2016).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader

from lit_codeRL.algorithms.dqn import (
    EPSILON_SCHEDULES,
    epsilon_schedule,
    huber_loss,
    linear_schedule,
    td_target,
)
from lit_codeRL.callbacks.greedy_eval import GreedyEvalCallback
from lit_codeRL.envs.codegen import (
    REWARD_TYPES,
    CachedExecutor,
    CodeGenerationEnv,
    RewardWeights,
    SandboxExecutor,
)
from lit_codeRL.policy.qnetworks import DuelingQNetwork, QNetwork
from lit_codeRL.problems import Problem, load_seed_json
from lit_codeRL.rollout.experience import ExperienceCollector, ReplayDataset
from lit_codeRL.rollout.q_evaluation import evaluate_problem, format_results
from lit_codeRL.rollout.replay import PrioritizedReplayBuffer, ReplayBuffer
from lit_codeRL.sandbox import SandboxConfig
from lit_codeRL.training.loaders import in_process_loader
from lit_codeRL.training.policy_module import as_settings
from lit_codeRL.training.rng import GlobalRNG, own_rank_state, save_rank_states


class DQNModule(pl.LightningModule):
    """Deep Q-learning on token-level code generation (see the module docstring)."""

    def __init__(
        self,
        train_problems: str = "data/examples/training_problems.json",
        eval_problems: str | None = "data/examples/eval_problems.json",
        # environment
        reward_type: str = "code_quality",
        reward_weights: RewardWeights | None = None,
        max_episode_steps: int = 12,
        vocab_size: int | None = 5000,
        code_tokens: list[str] | None = None,
        action_masking: bool = True,
        expression_statements: bool = False,
        spec_dim: int = 64,
        history: int = 12,
        sandbox: SandboxConfig = SandboxConfig(workers=1, timeout_s=2.0),  # noqa: B008 - shows in --print_config
        cache_size: int = 100_000,
        num_envs: int = 8,
        solved_problem_weight: float | None = None,
        unsolved_epsilon: float | None = None,
        # network
        dueling: bool = True,
        hidden_sizes: list[int] | None = None,
        embed_dim: int = 16,
        # DQN
        gamma: float = 0.95,
        n_step: int = 1,
        learning_rate: float = 1e-3,
        batch_size: int = 64,
        buffer_capacity: int = 50_000,
        learning_starts: int = 1_000,
        rounds_per_batch: int = 1,
        target_sync_every: int = 200,
        double_dqn: bool = True,
        huber_delta: float = 1.0,
        prioritized_replay: bool = False,
        per_alpha: float = 0.6,
        per_beta_start: float = 0.4,
        per_beta_steps: int = 10_000,
        epsilon_start: float = 1.0,
        epsilon_end: float = 0.05,
        epsilon_decay_steps: int = 30_000,
        epsilon_schedule: str = "linear",
        # evaluation
        greedy_eval_every: int = 500,
        eval_episodes: int = 1,
        eval_epsilon: float = 0.0,
        test_split: str = "both",
        test_results_path: str | None = None,
        seed: int = 0,
    ):
        """
        Args:
            train_problems: Seed-format JSON of the training problems (relative to the working directory).
            eval_problems: Seed-format JSON of held-out problems for ``test``; None = none.
            reward_type: ``code_quality`` (dense, weighted), ``sparse`` (1 if all tests pass) or
                ``curriculum`` (dense fading into sparse, harder problems unlocked with progress).
            reward_weights: Weights of the ``code_quality`` terms (correctness, all_pass_bonus, syntax,
                structure, efficiency, progress); None = ``RewardWeights()`` defaults.
            max_episode_steps: Actions per episode before truncation (the program is graded then).
            vocab_size: Code-token actions; the problem-built vocabulary is extended with integer
                literals to this size (5,000 = the design default). None = the built vocabulary only.
            code_tokens: Core code tokens (keywords, operators, builtins, literals); None =
                ``DEFAULT_CODE_TOKENS``. Argument slots and docstring numbers are always added.
            action_masking: Restrict actions to those that can still give valid Python.
            expression_statements: Allow lines that are bare expressions (useless without side effects).
            spec_dim: Width of the hashed bag-of-words of the problem spec in the observation.
            history: How many of the latest code tokens the observation holds.
            sandbox: The sandbox that grades generated code (``lit_codeRL.sandbox.SandboxConfig``):
                the isolating ``auto`` backend; one worker, since the env grades one program at a
                time; 2 s per program (the vocabulary's programs are tiny).
            cache_size: Entries of the LRU cache of graded programs.
            num_envs: Envs stepped in lockstep per collector round (one batched Q forward).
            solved_problem_weight: Sampling weight of a training problem the greedy policy solved at the
                latest greedy evaluation, relative to 1 for an unsolved one, so that exploration goes
                where it is still needed; None = every problem equally often (reshuffled round-robin).
            unsolved_epsilon: Least ε of episodes on training problems the greedy policy did not solve
                at the latest greedy evaluation (solved ones follow the schedule): a policy stuck at a
                partly correct program (``return a`` for max_of_three) keeps trying other tokens there.
                None = the schedule's ε everywhere.
            dueling: Dueling Q-network instead of a plain MLP head.
            hidden_sizes: MLP hidden widths; None = [256, 256].
            embed_dim: Embedding width of each history token.
            gamma: Discount factor.
            n_step: Rewards summed per transition before bootstrapping (n-step DQN; 1 = plain DQN).
            learning_rate: Adam learning rate.
            batch_size: Replay batch size.
            buffer_capacity: Replay buffer capacity (transitions).
            learning_starts: Transitions collected before the first update (CleanRL's name).
            rounds_per_batch: Collector rounds (each ``num_envs`` transitions) per optimizer step.
            target_sync_every: Optimizer steps between target-network syncs.
            double_dqn: Double DQN targets (online argmax, target value).
            huber_delta: Huber loss threshold.
            prioritized_replay: Proportional prioritized replay instead of uniform.
            per_alpha: Priority exponent α.
            per_beta_start: Initial importance-sampling exponent β (annealed to 1).
            per_beta_steps: Optimizer steps over which β reaches 1.
            epsilon_start: Initial exploration rate.
            epsilon_end: Final exploration rate.
            epsilon_decay_steps: Environment steps over which ε decays.
            epsilon_schedule: ``linear``, ``exponential`` or ``constant``.
            greedy_eval_every: Every this many optimizer steps, run the greedy policy once on each training
                problem and log ``greedy/train_solved`` (a ``ModelCheckpoint`` can monitor it); 0 = never.
            eval_episodes: Episodes per problem in ``test`` (success rate = fraction solved).
            eval_epsilon: Exploration during ``test`` (0 = greedy).
            test_split: Problems ``test`` runs: ``train``, ``eval`` or ``both``.
            test_results_path: Where ``test`` writes its per-problem JSON; None = nowhere.
            seed: Seed of envs, ε draws and replay sampling.
        """
        super().__init__()
        if reward_type not in REWARD_TYPES:
            raise ValueError(f"reward_type must be one of {REWARD_TYPES}, got {reward_type!r}")
        if epsilon_schedule not in EPSILON_SCHEDULES:
            raise ValueError(f"epsilon_schedule must be one of {EPSILON_SCHEDULES}, got {epsilon_schedule!r}")
        if solved_problem_weight is not None and solved_problem_weight < 0:
            raise ValueError(f"solved_problem_weight must be >= 0, got {solved_problem_weight}")
        if unsolved_epsilon is not None and not 0.0 <= unsolved_epsilon <= 1.0:
            raise ValueError(f"unsolved_epsilon must be in [0, 1], got {unsolved_epsilon}")
        if test_split not in ("train", "eval", "both"):
            raise ValueError(f"test_split must be train, eval or both, got {test_split!r}")
        self.save_hyperparameters()
        for key in ("sandbox", "reward_weights"):  # as dicts: checkpoints load with weights_only=True
            if dataclasses.is_dataclass(self.hparams[key]):
                self.hparams[key] = dataclasses.asdict(self.hparams[key])
        self.reward_weights = reward_weights or RewardWeights()
        self.train_set = load_seed_json(train_problems)
        self.eval_set = load_seed_json(eval_problems) if eval_problems else []
        self.executor = CachedExecutor(SandboxExecutor(as_settings(SandboxConfig, sandbox)), cache_size)
        envs = [self._make_env(self.train_set) for _ in range(num_envs)]
        self.vocabulary = envs[0].vocabulary
        layout = envs[0].layout
        self.n_actions = int(envs[0].action_space.n)
        net_cls = DuelingQNetwork if dueling else QNetwork
        net_args = (
            layout.spec_dim,
            layout.history,
            layout.meta_dim,
            self.n_actions,
            embed_dim,
            tuple(hidden_sizes or (256, 256)),
        )
        self.online = net_cls(*net_args)
        self.target = net_cls(*net_args)
        self.target.load_state_dict(self.online.state_dict())
        self.target.requires_grad_(False)
        buffer_cls = PrioritizedReplayBuffer if prioritized_replay else ReplayBuffer
        buffer_kwargs = {"alpha": per_alpha} if prioritized_replay else {}
        self.buffer = buffer_cls(buffer_capacity, layout.dim, self.n_actions, seed=seed, **buffer_kwargs)
        self.collector = ExperienceCollector(envs, seed=seed, n_step=n_step, gamma=gamma)
        self._eval_envs: dict[str, CodeGenerationEnv] = {}
        self._test_rows: list[dict[str, Any]] = []
        self._last_step_time = time.perf_counter()
        self.global_rng = GlobalRNG()
        self._lookahead: dict[str, torch.Tensor] | None = None
        """The replay batch of the next step, drawn one step ahead (see ``training_step``)."""

    # -- the algorithm: collect, TD loss, target sync ----------------------------------------------

    def train_dataloader(self) -> DataLoader:
        dataset = ReplayDataset(
            self.collector,
            self.buffer,
            self.q_values,
            lambda steps: self.epsilon(steps),
            batch_size=self.hparams.batch_size,
            rounds_per_batch=self.hparams.rounds_per_batch,
            learning_starts=self.hparams.learning_starts,
        )
        return in_process_loader(dataset, batch_size=None)  # the replay samples the live Q-network

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.global_rng.restore_pending()  # the first step after a resume: see training/rng.py
        max_steps = self.trainer.max_steps if self.trainer.max_steps and self.trainer.max_steps > 0 else None
        if max_steps:
            self.collector.set_progress(self.global_step / max_steps)
        if isinstance(self.buffer, PrioritizedReplayBuffer):
            hp = self.hparams
            self.buffer.beta = linear_schedule(self.global_step, hp.per_beta_start, 1.0, hp.per_beta_steps)

    def training_step(self, dataloader_iter: Any) -> torch.Tensor:
        # One batch ahead, as under Lightning's prefetch, which the learning checks were tuned
        # with: the batch of step k was collected and drawn during step k-1, before update k-1.
        # The module holds it (not Lightning's fetcher), so the checkpoint carries it; with the
        # fetcher's prefetch a checkpoint came after the next batch's env steps and replay draw,
        # and a resumed run, whose fresh iterator fetches anew, drew a different batch.
        batch = self._lookahead if self._lookahead is not None else self._pull(dataloader_iter)
        self._lookahead = self._pull(dataloader_iter)
        batch = {k: v.to(self.device) for k, v in batch.items()}
        hp = self.hparams
        q = self.online(batch["obs"]).gather(1, batch["actions"].long().unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            next_online = self.online(batch["next_obs"]) if hp.double_dqn else None
            next_target = self.target(batch["next_obs"])
            # The env grades the program at truncation too, so nothing follows either ending.
            dones = batch["terminated"] | batch["truncated"]
            target = td_target(
                batch["rewards"],
                dones,
                next_online if next_online is not None else next_target,
                next_target,
                hp.gamma**hp.n_step,  # n-step transitions bootstrap from n steps later
                double=hp.double_dqn,
                next_action_mask=batch["next_mask"],
            )
        loss = huber_loss(q, target, hp.huber_delta, batch["weights"] if hp.prioritized_replay else None)
        if hp.prioritized_replay:
            self.buffer.update_priorities(batch["indices"], (q - target).detach())
        self._log_step(loss, q)
        return loss

    @staticmethod
    def _pull(dataloader_iter: Any) -> dict[str, torch.Tensor]:
        item = next(dataloader_iter)
        return item[0] if isinstance(item, tuple) else item

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.global_step % self.hparams.target_sync_every == 0:
            self.target.load_state_dict(self.online.state_dict())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.online.parameters(), lr=self.hparams.learning_rate)

    # -- pieces --------------------------------------------------------------------------------

    def _make_env(
        self, problems: list[Problem], vocabulary: tuple[str, ...] | None = None
    ) -> CodeGenerationEnv:
        hp = self.hparams
        return CodeGenerationEnv(
            problems,
            code_tokens=hp.code_tokens,
            vocab_size=hp.vocab_size,
            vocabulary=vocabulary,
            max_steps=hp.max_episode_steps,
            reward_type=hp.reward_type,
            weights=self.reward_weights,
            executor=self.executor,
            spec_dim=hp.spec_dim,
            history=hp.history,
            action_masking=hp.action_masking,
            expression_statements=hp.expression_statements,
        )

    def epsilon(self, env_steps: int | None = None) -> float:
        """ε after ``env_steps`` environment steps (default: the collector's count)."""
        hp = self.hparams
        steps = self.collector.env_steps if env_steps is None else env_steps
        return epsilon_schedule(
            steps, hp.epsilon_start, hp.epsilon_end, hp.epsilon_decay_steps, hp.epsilon_schedule
        )

    @torch.no_grad()
    def update_problem_weights(self, rows: list[dict]) -> None:
        """Focus exploration from greedy results of ``evaluate("train")``: sampling weight 1 for an
        unsolved problem and ``solved_problem_weight`` for a solved one, and ε at least
        ``unsolved_epsilon`` on unsolved ones (each part a no-op when its knob is None)."""
        floor = self.hparams.unsolved_epsilon
        if floor is not None:
            self.collector.set_epsilon_floors([0.0 if r["success_rate"] == 1.0 else floor for r in rows])
        w = self.hparams.solved_problem_weight
        if w is None:
            return
        weights = [w if r["success_rate"] == 1.0 else 1.0 for r in rows]
        # All solved (and w = 0) would leave nothing to sample: fall back to uniform.
        self.collector.set_problem_weights(weights if sum(weights) > 0 else None)

    @torch.no_grad()
    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        """Online-network Q-values for CPU observations (used by the collector and evaluation)."""
        was_training = self.online.training
        self.online.eval()
        q = self.online(obs.to(self.device))
        self.online.train(was_training)
        return q.cpu()

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.online(obs)

    def configure_callbacks(self) -> list[pl.Callback]:
        every = self.hparams.greedy_eval_every
        return [GreedyEvalCallback(every)] if every else []

    def _log_step(self, loss: torch.Tensor, q: torch.Tensor) -> None:
        # self.log costs ~0.5 ms a call on CPU, comparable to the whole update: log on logging steps only.
        every = max(int(getattr(self.trainer, "log_every_n_steps", 50) or 1), 1)
        if self.global_step % every:
            return
        stats = self.collector.stats()
        now = time.perf_counter()
        metrics = {
            "train/loss": loss.detach(),
            "train/q_mean": q.detach().mean(),
            "train/epsilon": self.epsilon(),
            "train/buffer_size": float(len(self.buffer)),
            "train/env_steps": stats["env_steps"],
            "train/episodes": stats["episodes"],
            "train/episode_return": stats["episode_return"],
            "train/success_rate": stats["success_rate"],
            "train/episode_length": stats["episode_length"],
            "time/policy_s": self.collector.timings["policy_s"],
            "time/env_s": self.collector.timings["env_s"],
            "time/exec_s": self.executor.exec_time_s,
            "time/step_s": (now - self._last_step_time) / every,
            "exec/cache_hits": float(self.executor.hits),
            "exec/cache_misses": float(self.executor.misses),
        }
        self._last_step_time = now
        self.log_dict(
            metrics, on_step=True, on_epoch=False, prog_bar=False, batch_size=self.hparams.batch_size
        )
        self.log("success", stats["success_rate"], prog_bar=True, on_step=True, on_epoch=False, batch_size=1)

    def teardown(self, stage: str) -> None:
        self.executor.close()  # restarts lazily if used again (test after fit)

    # -- checkpointing -------------------------------------------------------------------------

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Per rank: under DDP every rank has its own envs, buffer and RNG streams (training/rng.py).
        state = {
            "buffer": self.buffer.state_dict(),
            "collector": self.collector.state_dict(),
            "epsilon": self.epsilon(),
            "vocabulary": list(self.vocabulary),
            "global_rng": self.global_rng.state_dict(),
            "lookahead": self._lookahead,
        }
        save_rank_states(checkpoint, "dqn_state", self._trainer, state)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        rank = self.trainer.global_rank if self._trainer is not None else 0
        state = own_rank_state(checkpoint, "dqn_state", rank)
        if state is None:
            return
        if tuple(state["vocabulary"]) != tuple(self.vocabulary):
            raise ValueError("checkpoint was trained with a different action vocabulary")
        self.buffer.load_state_dict(state["buffer"])
        self.collector.load_state_dict(state["collector"])
        if "global_rng" in state:  # checkpoints from before exact resume lack these
            self.global_rng.load_state_dict(state["global_rng"])
            self._lookahead = state["lookahead"]

    # -- evaluation ----------------------------------------------------------------------------

    def eval_env(self, split: str) -> CodeGenerationEnv:
        """The env over ``split``'s problems (``train``/``eval``), same vocabulary as training."""
        if split not in self._eval_envs:
            problems = self.train_set if split == "train" else self.eval_set
            self._eval_envs[split] = self._make_env(problems, vocabulary=self.vocabulary)
        return self._eval_envs[split]

    def evaluate(self, split: str, episodes: int | None = None, epsilon: float | None = None) -> list[dict]:
        """Per-problem results of ``split``: success rate over ``episodes`` and the last code."""
        episodes = episodes or self.hparams.eval_episodes
        epsilon = self.hparams.eval_epsilon if epsilon is None else epsilon
        env = self.eval_env(split)
        return [
            evaluate_problem(env, self.q_values, split, i, episodes, epsilon)
            for i in range(len(env.problems))
        ]

    def test_dataloader(self) -> DataLoader:
        splits = ["train", "eval"] if self.hparams.test_split == "both" else [self.hparams.test_split]
        items = [
            {"split": s, "index": i}
            for s in splits
            for i in range(len(self.train_set if s == "train" else self.eval_set))
        ]
        return DataLoader(items, batch_size=None, collate_fn=lambda x: x)

    def on_test_epoch_start(self) -> None:
        self._test_rows = []

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        split, index = batch["split"], int(batch["index"])
        row = evaluate_problem(
            self.eval_env(split),
            self.q_values,
            split,
            index,
            self.hparams.eval_episodes,
            self.hparams.eval_epsilon,
        )
        self._test_rows.append(row)

    def on_test_epoch_end(self) -> None:
        rows = self._test_rows
        print(format_results(rows))
        for split in sorted({r["split"] for r in rows}):
            split_rows = [r for r in rows if r["split"] == split]
            self.log(f"test/{split}_solved", float(sum(r["success_rate"] == 1.0 for r in split_rows)))
            self.log(f"test/{split}_success_rate", float(np.mean([r["success_rate"] for r in split_rows])))
        if self.hparams.test_results_path:
            path = Path(self.hparams.test_results_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(rows, indent=2))
