"""``lit-coderl``: the LightningCLI entry point (fit / validate / test; ``curves``).

``lit-coderl fit --config configs/quickstart.yaml``

A subcommand runs only where the module has its loop: the training modules ``fit``, the
``EvaluationModule`` ``validate`` (and ``test``, the same evaluation), ``DQNModule`` ``fit`` and
``test``. Anything else (``predict`` everywhere) is refused in one line before a model loads.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import os
import re
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any, NoReturn

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from lit_codeRL.console import setup_console
from lit_codeRL.errors import ConfigError
from lit_codeRL.policy import platform
from lit_codeRL.policy.precision import resolve_precision, set_matmul_precision
from lit_codeRL.training.optim import LEGACY_KEYS, move_legacy_keys
from lit_codeRL.training.strategies import check_strategy  # also registers strategy="fsdp2"

# Our modules optimise manually and a checkpoint after the step is the consistent one (weights,
# optimizer and global_step agree); Lightning's 20-line suggestion to save pre-step weights is noise.
warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization")

log = logging.getLogger("lit_codeRL")


class CodeRLTrainer(Trainer):
    """A Lightning ``Trainer`` that also understands ``precision="auto"``.

    ``auto`` picks bf16-mixed on bf16-capable GPUs, 16-mixed on older GPUs (V100, T4; 32-true
    under FSDP2, which refuses 16-mixed) and 32-true on CPU; the choice is logged once (see
    :func:`~lit_codeRL.policy.precision.resolve_precision`). A reduced precision on an Ampere+ GPU
    lets the remaining fp32 matmuls use TF32 (:func:`~lit_codeRL.policy.precision.set_matmul_precision`).
    ``strategy="fsdp2"`` is FSDP2 data parallelism and classic FSDP is refused
    (``training/strategies.py``). Every other argument is Lightning's own.
    """

    def __init__(self, *args: Any, precision: Any = "auto", **kwargs: Any) -> None:
        check_strategy(kwargs.get("strategy"))
        accelerator = kwargs.get("accelerator", "auto")
        kwargs["callbacks"] = _with_default_learning_curve(
            _with_default_progress_bar(kwargs.get("callbacks"), kwargs.get("enable_progress_bar"))
        )
        precision = resolve_precision(precision, str(accelerator), strategy=kwargs.get("strategy", "auto"))
        super().__init__(*args, precision=precision, **kwargs)
        # Before fit: Lightning checks the matmul precision (and prints its tip) at device setup.
        set_matmul_precision(self.precision, self.strategy.root_device)


def _with_default_progress_bar(callbacks: Any, enabled: bool | None) -> Any:
    """Add :class:`StepLimitedRichProgressBar` where Lightning would add its own Rich bar."""
    from lightning.pytorch.callbacks import Callback, ProgressBar
    from lightning.pytorch.callbacks.progress.rich_progress import _RICH_AVAILABLE

    if enabled is False or not _RICH_AVAILABLE:
        return callbacks
    listed = [] if callbacks is None else [callbacks] if isinstance(callbacks, Callback) else list(callbacks)
    if any(isinstance(cb, ProgressBar) for cb in listed):
        return callbacks
    from lit_codeRL.callbacks.progress import StepLimitedRichProgressBar

    return [*listed, StepLimitedRichProgressBar()]


def _with_default_learning_curve(callbacks: Any) -> Any:
    """Every run draws its learning curve at the end, unless the config lists its own curve callback."""
    from lightning.pytorch.callbacks import Callback

    from lit_codeRL.callbacks.curves import LearningCurveCallback

    listed = [] if callbacks is None else [callbacks] if isinstance(callbacks, Callback) else list(callbacks)
    if any(isinstance(cb, LearningCurveCallback) for cb in listed):
        return callbacks
    return [*listed, LearningCurveCallback()]


class CodeRLArgumentParser(LightningArgumentParser):
    """Lightning's parser, with parse errors cut to the line a person can act on.

    jsonargparse answers a misspelt key with the whole usage (~60 lines) and a dump of the
    given value; here it is one line naming the key and the closest valid one, and a second
    line saying where the full list is. ``LIT_CODERL_TRACEBACK=1`` restores the original.

    Prefixes of keys are not accepted (``allow_abbrev=False``): argparse would otherwise take
    ``--trainer.max_step 3`` for ``--trainer.max_steps`` and start a run the user did not ask for.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or _env_flag("LIT_CODERL_TRACEBACK") or _env_flag("JSONARGPARSE_DEBUG"):
            super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        sys.stderr.write(f"lit-coderl: error: {concise_parse_error(message, parser)}\n")
        raise SystemExit(2)

    def format_help(self, *args: Any, **kwargs: Any) -> str:
        text = super().format_help(*args, **kwargs)
        if any(action.dest == "model.help" for action in self._actions):
            # An algorithm's own knobs (and their docs) live behind --model.help, which a
            # reader of this page would not guess.
            names = ", ".join(sorted(_module_class_names()))
            command = " ".join(["lit-coderl", *self.prog.replace("[options]", "").split()[1:]])
            text += f"\nAlgorithm knobs, documented: {command} --model.help NAME (NAME: {names})\n"
        elif any(getattr(action, "dest", None) == "subcommand" for action in self._actions):
            text += "\nA finished run's learning curve as a PNG: lit-coderl curves RUN_DIR [--out PNG]\n"
            text += "One dumped episode as readable Markdown: lit-coderl episode ROLLOUTS.jsonl [--best]\n"
            text += "Synthesized, validated SWE and debugging tasks: lit-coderl synth SOURCE... --out DIR\n"
            text += "The policy behind an OpenAI-compatible API: lit-coderl serve --model M [--port 8000]\n"
        return text


class CodeRLCLI(LightningCLI):
    """LightningCLI with our trainer, any registered ``LightningModule`` and no separate datamodule.

    Algorithms own their rollout data (it depends on the live policy), so there is no
    ``--data`` group; modules are chosen with ``model.class_path`` (short names work:
    ``--model GRPOModule``).
    """

    def __init__(self, args: list[str] | None = None, run: bool = True, **kwargs: Any) -> None:
        setup_console()  # quiet third-party notices and `[lit-coderl]` log lines, in-process too
        _register_modules()
        _enable_field_docstrings()
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        kwargs.setdefault("parser_class", CodeRLArgumentParser)
        super().__init__(
            LightningModule,
            trainer_class=CodeRLTrainer,
            subclass_mode_model=True,
            auto_configure_optimizers=False,
            args=args,
            run=run,
            **kwargs,
        )

    def before_instantiate_classes(self) -> None:
        """Refuse a subcommand the chosen module has no loop for, before any model loads."""
        if self.subcommand is not None:
            check_subcommand(self.subcommand, _class(self.config[self.subcommand].model.class_path))
        # A checkpoint from before the optimizer group, resumed with --ckpt_path: its flat knobs
        # come back as hparams no init arg takes.
        config = self.config[self.subcommand] if self.subcommand else self.config
        _move_legacy_optimizer_hparams(config.model)

    def before_fit(self) -> None:
        """Log the detected platform and the trainer's resolved setup once, on global rank 0."""
        if self.trainer.is_global_zero:
            log.info(platform.describe(platform.current(apply=False), _trainer_line(self.trainer)))

    def test(self, **kwargs: Any) -> Any:
        """``lit-coderl test``: Lightning's test loop, or for a module that evaluates in its
        validation loop (``EvaluationModule``) that evaluation: held-out scoring is what both mean."""
        if "test" in module_loops(type(self.model)):
            return self.trainer.test(**kwargs)
        log.info("test: %s evaluates in its validation loop; running it", type(self.model).__name__)
        return self.trainer.validate(**kwargs)


_STEP_HOOKS = {
    "fit": "training_step",
    "validate": "validation_step",
    "test": "test_step",
    "predict": "predict_step",
}


def module_loops(cls: type) -> list[str]:
    """The subcommands ``cls`` has a loop for: those whose step hook it defines itself (Lightning's
    default ``predict_step`` calls ``forward``, which no module here has)."""
    return [
        sub for sub, hook in _STEP_HOOKS.items() if getattr(cls, hook) is not getattr(LightningModule, hook)
    ]


def check_subcommand(subcommand: str, cls: type) -> None:
    """A one-line :class:`ConfigError` where ``cls`` has no loop for ``subcommand`` (instead of
    Lightning's traceback at the first hook); ``test`` of a module that only validates is its
    validation (see :meth:`CodeRLCLI.test`)."""
    loops = module_loops(cls)
    if "validate" in loops and "test" not in loops:
        loops.append("test")
    if subcommand in loops:
        return
    from lit_codeRL.training.policy_module import PolicyModule

    if subcommand != "fit" and issubclass(cls, PolicyModule):
        how = (
            "it trains, and evaluates during fit (its callbacks); to score a trained policy on code: lit-coderl "
            "validate --config configs/eval_mbpp.yaml --model.init_args.checkpoint <run>/checkpoints/last.ckpt"
        )
    else:
        how = "it has " + ", ".join(f"`lit-coderl {sub}`" for sub in loops)
    raise ConfigError(f"{cls.__name__} has no `{subcommand}` loop: {how}")


def _class(class_path: str) -> type:
    module, _, name = class_path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _trainer_line(trainer: Trainer) -> str:
    """``precision X, Strategy, N processes (nodes x devices), ClusterEnvironment [job]``."""
    strategy = trainer.strategy
    from lightning.fabric.plugins.environments import SLURMEnvironment

    env = getattr(strategy, "cluster_environment", None)
    # A 1-task SLURM job runs SingleDeviceStrategy (no cluster env) but still auto-requeues.
    where = (
        type(env).__name__
        if env is not None
        else "SLURMEnvironment"
        if SLURMEnvironment.detect()
        else "local"
    )
    job = os.environ.get("SLURM_JOB_ID") if where == "SLURMEnvironment" else None
    return (
        f"precision {trainer.precision}, {type(strategy).__name__}, {trainer.world_size} processes "
        f"({trainer.num_nodes} node(s) x {trainer.num_devices}), {where}{f' job {job}' if job else ''}"
    )


def _enable_field_docstrings() -> None:
    """Show each settings dataclass field's docstring (the string literal under the field) as its
    ``--help`` text and ``--print_config=comments`` comment; jsonargparse reads only ``Args:``
    sections unless told to (it costs ~1 s of source parsing per CLI start)."""
    try:
        from jsonargparse import set_parsing_settings
    except ImportError:  # older jsonargparse has only this setter
        from jsonargparse import set_docstring_parse_options

        set_docstring_parse_options(attribute_docstrings=True)
    else:
        set_parsing_settings(docstring_parse_attribute_docstrings=True)


MODULE_PACKAGES = (
    "lit_codeRL.modules.grpo",
    "lit_codeRL.modules.reinforce",
    "lit_codeRL.modules.bc",
    "lit_codeRL.modules.dqn",
    "lit_codeRL.modules.spiral",
    "lit_codeRL.modules.ppo",
    "lit_codeRL.modules.code_game",
    "lit_codeRL.modules.evaluate",
)


def _register_modules() -> None:
    # Importing makes the short class names (GRPOModule, REINFORCEModule, BCModule, DQNModule) resolvable from YAML/CLI.
    for name in MODULE_PACKAGES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:
                raise


def main(args: list[str] | None = None) -> None:
    """Console-script entry point; user-fixable errors become one line and exit code 2."""
    setup_console()
    argv = sys.argv[1:] if args is None else list(args)
    if argv[:1] == ["curves"]:
        _curves_command(argv[1:])
        return
    if argv[:1] == ["regrade"]:
        _regrade_command(argv[1:])
        return
    if argv[:1] == ["episode"]:
        _episode_command(argv[1:])
        return
    if argv[:1] == ["serve"]:
        from lit_codeRL.gateway.cli import command as serve_command

        serve_command(argv[1:])
        return
    if argv[:1] == ["synth"]:
        from lit_codeRL.problems.synth.cli import command as synth_command

        synth_command(argv[1:])
        return
    try:
        # Before any model, dataset or logger loads (they read HF_HUB_OFFLINE, WANDB_MODE, ...).
        # Here, not in CodeRLCLI: changing os.environ is the job of the process's entry point.
        platform.current()
        CodeRLCLI(args=args)
    except Exception as err:
        cause = _user_error(err)
        if cause is None or _env_flag("LIT_CODERL_TRACEBACK"):
            raise
        print(f"lit-coderl: error: {_describe(cause)}", file=sys.stderr)
        raise SystemExit(2) from None


def _regrade_command(argv: list[str]) -> None:
    """``lit-coderl regrade ROLLOUTS.jsonl``: grade the dumped diffs of a SWE run again."""
    from lit_codeRL.envs.swe.regrade import main as regrade_main

    try:
        regrade_main(argv)
    except ConfigError as err:
        print(f"lit-coderl regrade: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def _episode_command(argv: list[str]) -> None:
    """``lit-coderl episode ROLLOUTS.jsonl``: one dumped episode as readable Markdown."""
    from lit_codeRL.rollout.episode_view import main as episode_main

    try:
        episode_main(argv)
    except ConfigError as err:
        print(f"lit-coderl episode: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def _curves_command(argv: list[str]) -> None:
    """``lit-coderl curves RUN_DIR [--out PNG]``: the learning-curve PNG of a finished run."""
    import argparse

    from lit_codeRL.callbacks.curves import curves_for_run

    parser = argparse.ArgumentParser(
        prog="lit-coderl curves",
        description="Draw a finished run's learning curve (reward, pass rate, evaluation, step "
        "time) from its metrics.csv into a PNG.",
    )
    parser.add_argument("run_dir", help="a run's log dir (runs/x/version_0) or a parent: its newest run")
    parser.add_argument("--out", default=None, help="PNG path (default: <run>/learning_curve.png)")
    ns = parser.parse_args(argv)
    try:
        png = curves_for_run(ns.run_dir, ns.out)
    except FileNotFoundError as err:
        print(f"lit-coderl curves: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    print(png)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() not in ("", "0", "false", "no")


_PACKAGE_DIR = str(Path(__file__).resolve().parent)


def _user_error(err: BaseException | None) -> BaseException | None:
    """The user-fixable error behind ``err`` (jsonargparse wraps instantiation errors), if any:
    a :class:`ConfigError`, a missing file, or a ``ValueError`` raised by an argument check in
    one of our constructors (a module's ``__init__``, a settings dataclass's ``__post_init__``).
    Any other ``ValueError`` (a library's, or one raised mid-training) keeps its traceback."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, ConfigError | FileNotFoundError):
            return err
        if isinstance(err, ValueError) and _raised_by_our_constructor(err):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def _raised_by_our_constructor(err: BaseException) -> bool:
    frames = traceback.extract_tb(err.__traceback__)
    if not frames or frames[-1].name not in ("__init__", "__post_init__"):
        return False
    return str(Path(frames[-1].filename).resolve()).startswith(_PACKAGE_DIR)


def _describe(err: BaseException) -> str:
    """``err``'s message, prefixed with the class whose constructor rejected the value."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None and tb.tb_frame.f_code.co_name in ("__init__", "__post_init__"):
        owner = tb.tb_frame.f_locals.get("self")
        if owner is not None:
            return f"{type(owner).__name__}: {err}"
    return str(err)


def _move_legacy_optimizer_hparams(model: Any) -> None:
    """Move the optimizer knobs of a checkpoint written before ``OptimizerSettings``
    (``learning_rate``, ..., ``fused_optimizer`` as module args) into ``optimizer``.

    Lightning's ``--ckpt_path`` handling parses the checkpoint's hparams as the model config and
    keeps those the module does not take in ``dict_kwargs``, which instantiation would then pass
    as unknown keyword arguments."""
    extra = model.get("dict_kwargs") if model is not None else None
    group = model.get("init_args.optimizer") if extra else None
    if group is None or not set(extra) & set(LEGACY_KEYS):
        return
    rest, moved = move_legacy_keys(extra)
    moved_keys = set(extra) - set(rest)
    for key, value in moved.items():
        group[key] = value
    if rest:
        model["dict_kwargs"] = rest
    else:
        del model["dict_kwargs"]
    log.info("checkpoint hparams: moved %s into model.init_args.optimizer", ", ".join(sorted(moved_keys)))


# ---------------------------------------------------------------------------- parse errors
_CLASS_PROBLEM = re.compile(
    r"Problem with given class_path '([\w.]+)':\n(.*?)(?=\n\s*- |\n\s*Given value|\Z)", re.S
)
_UNKNOWN_KEY = re.compile(
    r"Group '(?P<group>[\w.]+)' does not accept option '(?P<key>[\w.]+)'"
    r"|Option '(?P<key2>[\w.]+)' is not accepted"
    r"|does not accept option '(?P<key3>[\w.]+)'"
    r"|unrecognized arguments: --?(?P<key4>[\w.]+)"
)
_PARSER_KEY = re.compile(r'^Parser key "([\w.]+)":')
_NOT_IMPORTABLE = re.compile(r"Expected a dot import path string: (\S+)")


def concise_parse_error(message: str, parser: Any) -> str:
    """One or two lines for a jsonargparse parse error: the unknown key and the closest valid
    one, or the innermost reason a value was rejected, prefixed with its full key."""
    # A subcommand parser's prog is "<script> [options] fit".
    command = " ".join(["lit-coderl", *parser.prog.replace("[options]", "").split()[1:]])
    outer = _PARSER_KEY.match(message)
    problem = _CLASS_PROBLEM.search(message)
    if outer and problem:
        class_path, detail = problem.group(1), problem.group(2)
        prefix = f"{outer.group(1)}.init_args"
        unknown = _unknown_key(detail)
        if unknown is not None:
            valid = _class_keys(class_path)
            help_hint = f"(every key: {command} --{outer.group(1)}.help {class_path.rsplit('.', 1)[-1]})"
            return _did_you_mean(f"{prefix}.{unknown}", [f"{prefix}.{k}" for k in valid]) + "\n" + help_hint
        inner = _PARSER_KEY.match(detail.strip())
        reason = " ".join(line.strip() for line in detail.strip().splitlines()[1 if inner else 0 :])
        key = f"{prefix}.{inner.group(1)}" if inner else prefix
        return f"{key}: {reason}"
    if outer and (missing := _NOT_IMPORTABLE.search(message)):
        names = sorted(_module_class_names())
        return _did_you_mean(missing.group(1), names, what="class") + f"\n(known: {', '.join(names)})"
    unknown = _unknown_key(message)
    if unknown is not None:
        valid = [a.dest for a in parser._actions if a.dest and a.dest != "help"]
        return _did_you_mean(unknown, valid) + f"\n(every key: {command} --help)"
    return message


def _unknown_key(text: str) -> str | None:
    match = _UNKNOWN_KEY.search(text)
    if match is None:
        return None
    key = match.group("key") or match.group("key2") or match.group("key3") or match.group("key4")
    return f"{match.group('group')}.{key}" if match.group("group") else key


def _did_you_mean(key: str, valid: list[str], what: str = "key") -> str:
    # A module arg from before the optimizer group (README: "Optimizer settings"), or a misspelt one.
    head, _, last = key.rpartition(".")
    old = difflib.get_close_matches(last, list(LEGACY_KEYS), n=1, cutoff=0.8)
    moved = f"{head}.optimizer.{LEGACY_KEYS[old[0]]}" if old else None
    if moved in valid and old[0] == last:
        return f"unknown {what} `{key}`: the optimizer knobs moved into a group, use `{moved}`"
    close = [moved] if moved in valid else difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if not close:  # a misspelt last part of a long dotted key: compare last parts
        last = {k.rsplit(".", 1)[-1]: k for k in valid}
        close = [last[m] for m in difflib.get_close_matches(key.rsplit(".", 1)[-1], list(last), n=1)]
    hint = f"; did you mean `{close[0]}`?" if close else ""
    return f"unknown {what} `{key}`{hint}"


def _class_keys(class_path: str) -> list[str]:
    """Every dotted init key of ``class_path`` (nested dataclass fields included)."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(_class(class_path), fail_untyped=False)
    return [a.dest for a in parser._actions if a.dest != "help" and not a.dest.endswith(".help")]


def _module_class_names() -> set[str]:
    return {
        cls.__name__
        for name in MODULE_PACKAGES
        if (mod := sys.modules.get(name)) is not None
        for cls in vars(mod).values()
        if isinstance(cls, type) and issubclass(cls, LightningModule) and cls.__module__ == name
    }


if __name__ == "__main__":
    main()
