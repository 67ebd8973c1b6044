"""``lit-coderl``: the LightningCLI entry point (fit / validate / test / predict).

``lit-coderl fit --config configs/quickstart.yaml --model.init_args.learning_rate 1e-6``
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.cli import LightningCLI

from lit_codeRL.errors import ConfigError
from lit_codeRL.policy.precision import resolve_precision

# Our modules optimise manually and a checkpoint after the step is the consistent one (weights,
# optimizer and global_step agree); Lightning's 20-line suggestion to save pre-step weights is noise.
warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization")

log = logging.getLogger("lit_codeRL")


class CodeRLTrainer(Trainer):
    """A Lightning ``Trainer`` that also understands ``precision="auto"``.

    ``auto`` picks bf16-mixed on bf16-capable GPUs, 16-mixed on older GPUs (V100) and 32-true on
    CPU; the choice is logged. Every other argument is Lightning's own.
    """

    def __init__(self, *args: Any, precision: Any = "auto", **kwargs: Any) -> None:
        accelerator = kwargs.get("accelerator", "auto")
        kwargs["callbacks"] = _with_default_progress_bar(
            kwargs.get("callbacks"), kwargs.get("enable_progress_bar")
        )
        super().__init__(*args, precision=resolve_precision(precision, str(accelerator)), **kwargs)


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


class CodeRLCLI(LightningCLI):
    """LightningCLI with our trainer, any registered ``LightningModule`` and no separate datamodule.

    Algorithms own their rollout data (it depends on the live policy), so there is no
    ``--data`` group; modules are chosen with ``model.class_path`` (short names work:
    ``--model GRPOModule``).
    """

    def __init__(self, args: list[str] | None = None, run: bool = True, **kwargs: Any) -> None:
        _register_modules()
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        super().__init__(
            LightningModule,
            trainer_class=CodeRLTrainer,
            subclass_mode_model=True,
            auto_configure_optimizers=False,
            args=args,
            run=run,
            **kwargs,
        )


def _register_modules() -> None:
    # Importing makes the short class names (GRPOModule, REINFORCEModule, BCModule, DQNModule) resolvable from YAML/CLI.
    import importlib

    for name in (
        "lit_codeRL.modules.grpo",
        "lit_codeRL.modules.reinforce",
        "lit_codeRL.modules.bc",
        "lit_codeRL.modules.dqn",
        "lit_codeRL.modules.spiral",
        "lit_codeRL.modules.evaluate",
    ):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:
                raise


def _setup_logging() -> None:
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[lit-coderl] %(message)s"))
        log.addHandler(handler)
        log.setLevel(os.environ.get("LIT_CODERL_LOG_LEVEL", "INFO"))
        log.propagate = False


def main(args: list[str] | None = None) -> None:
    """Console-script entry point; user-fixable errors become one line and exit code 2."""
    _setup_logging()
    try:
        CodeRLCLI(args=args)
    except Exception as err:
        cause = _user_error(err)
        if cause is None or os.environ.get("LIT_CODERL_TRACEBACK"):
            raise
        print(f"lit-coderl: error: {cause}", file=sys.stderr)
        raise SystemExit(2) from None


def _user_error(err: BaseException | None) -> BaseException | None:
    """The user-fixable error behind ``err`` (jsonargparse wraps instantiation errors), if any."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, ConfigError | FileNotFoundError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


if __name__ == "__main__":
    main()
