"""A real GRPO ``fit`` step on agent episodes that carry bytes which are not UTF-8 and a junit report
rewritten with an unknown encoding (issue #47, items 5 and 6): every episode ends in a defined
reward, the step trains, the grade metrics are logged, and nothing escapes ``fit``. The junit
rewriter is a process the code under test leaves behind, named as it starts (its file started none
at the base): ``tamper``; a junit the parent cannot read is ``rejected``
(``tests/envs/test_swe_actions_judge.py``).

The policy is a scripted engine (a random model never writes a valid tool call); everything after
its text is real: the episode runner, the SWE env and the debugging gym in bubblewrap, grading,
tokenization of the observations, the loss and the optimizer step.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.rollout.test_swe_episodes import ScriptedEngine

pytestmark = pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap is not installed")

JUNIT_REWRITER = (
    "import subprocess as _sp\n"
    "_sp.Popen(['sh', '-c', 'for i in $(seq 1 30); do sleep 0.05; for f in /opt/*/*.xml; do "
    'printf \\\'<?xml version="1.0" encoding="x-lcrl-nope"?><testsuites/>\\\' > $f; done; done\'], '
    "start_new_session=True, close_fds=False)\n"
)
BYTES_SWE = (
    "<execute>printf 'caf\\351\\n' > \"$(printf 'n\\351w.txt')\"; printf '\\377\\376\\200 x\\n' > data.bin; "
    "cat data.bin; ls</execute>"
)
JUNIT_SWE = (
    "<execute>cat > /tmp/p.py <<'EOF'\n" + JUNIT_REWRITER + "EOF\n"
    'for f in $(git ls-files \'*.py\' | grep -v test); do cat /tmp/p.py "$f" > /tmp/m && cp /tmp/m "$f"; done'
    "</execute>"
)
BYTES_DEBUG = "<pdb>!open(b'caf\\xe9.txt', 'wb').write(b'\\xff\\xfe\\x80 x\\n')</pdb>"
JUNIT_DEBUG = (
    "<pdb>!import glob; p = "
    + repr(JUNIT_REWRITER)
    + "; [open(f, 'w').write(p + open(f).read()) for f in [g for g in glob.glob('*.py') "
    "if not g.startswith('test_')]]</pdb>"
)
SCRIPTS = {
    "swe": [[BYTES_SWE, "<submit/>"], [JUNIT_SWE, "<submit/>"]],
    "debug": [[BYTES_DEBUG, "<listdir/>", "<submit/>"], [JUNIT_DEBUG, "<submit/>"]],
}


class Engine(ScriptedEngine):
    """The scripted policy, with the engine calls a training module makes."""

    def replicate(self, policy) -> None:  # noqa: ANN001
        pass

    def sync_weights(self, policy) -> None:  # noqa: ANN001
        pass


@pytest.mark.parametrize("env_name", ["swe", "debug"])
def test_bwrap_fit_step_survives_non_utf8_bytes_and_a_broken_junit(tmp_path, env_name):
    from lightning.pytorch import Trainer

    from lit_codeRL.envs.debug.env import DebugSettings
    from lit_codeRL.envs.settings import EnvSettings
    from lit_codeRL.envs.swe.env import SWESettings
    from lit_codeRL.modules.grpo import GRPOModule
    from lit_codeRL.policy.loading import ModelSettings
    from lit_codeRL.policy.sampling import SamplingParams
    from lit_codeRL.rollout.prompts import ProblemSettings

    workspace = {"backend": "bwrap"}
    env = EnvSettings(
        name=env_name,
        max_turns=3,
        max_context_tokens=8192,
        swe=SWESettings(repo_cache=str(tmp_path / "swe-cache"), workspace=workspace),
        debug=DebugSettings(
            repo_cache=str(tmp_path / "debug-cache"), workspace=workspace, show_initial_eval=False
        ),
    )
    module = GRPOModule(
        model=ModelSettings(name_or_path="tiny-random"),
        problems=ProblemSettings(source=env_name, split="train", limit=2),
        env=env,
        sampling=SamplingParams(max_new_tokens=16),
        num_generations=2,
        prompts_per_step=1,
        save_hf_model=False,
    )
    module.engine = Engine(module.tokenizer, SCRIPTS[env_name])
    trainer = Trainer(
        accelerator="cpu",
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module)
    assert trainer.global_step == 1
    records = module.last_records
    grades = [r["grade"]["verdict"] for r in records]
    assert grades == ["unresolved", "tamper"], [r.get("grade") for r in records]
    assert all(r["valid"] and r["reward"] == 0.0 for r in records)
    assert "started a process" in records[1]["grade"]["reason"]
    raw = records[0]["diff"].encode("utf-8", "surrogateescape")
    assert b"caf\xe9" in raw
    json.dumps(records)  # the rollout dump writes them (surrogates escaped)
    metrics = trainer.callback_metrics
    assert float(metrics["train/grade/tamper"]) == 0.5 and float(metrics["train/grade/unresolved"]) == 0.5
    assert float(metrics["train/grade/tamper_rate"]) == 0.5 and float(metrics["train/episodes/masked"]) == 0.0
