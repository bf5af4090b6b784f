"""``build reproduce``: re-run the recipe an artifact records and compare.

The artifact's metadata names the build (``build``), its parameters
(``parameters``), the data files with their sha256 (``data_sha256``), the
model fingerprint and the date (``source_date_epoch``). Reproduction finds
each data file (relative to the current folder, else to a folder above the
artifact), refuses files whose bytes changed, re-runs the same build on the
same model with the recorded date, and compares tensor by tensor: equal
tensor content (``content_sha256``) is a reproduction; the file bytes are
equal too when the builder's versions are the same.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import torch

from innerguard.engine.build import artifact
from innerguard.engine.build.heads import BUILTIN, PROTOCOL_FILE, HeadsParams, build_heads
from innerguard.engine.build.probe import ProbeParams, build_probe
from innerguard.engine.build.recipe import Built, Params, save
from innerguard.engine.build.token_probe import TokenProbeParams, build_token_probe
from innerguard.engine.build.vector import VectorParams, build_vector
from innerguard.engine import models
from innerguard.engine.errors import InnerguardError

BUILDS: dict[str, tuple[type[Params], Callable[..., Built]]] = {
    "heads": (HeadsParams, build_heads),
    "probe": (ProbeParams, build_probe),
    "token-probe": (TokenProbeParams, build_token_probe),
    "vector": (VectorParams, build_vector),
}


class ReproduceError(InnerguardError):
    pass


@dataclass
class TensorDiff:
    name: str
    same: bool
    detail: str


@dataclass
class Comparison:
    artifact: str
    rebuilt: str
    artifact_content: str
    rebuilt_content: str
    artifact_file: str
    rebuilt_file: str
    tensors: list[TensorDiff] = field(default_factory=list)
    report: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return self.artifact_content == self.rebuilt_content

    @property
    def same_file(self) -> bool:
        return self.artifact_file == self.rebuilt_file


@dataclass(frozen=True)
class Recipe:
    params: Params
    metadata: dict[str, str]
    inputs: dict[str, str]  # recorded path -> the file found for it


def read_recipe(path: str | os.PathLike) -> Recipe:
    _, metadata = artifact.read(path)
    kind = metadata.get("build")
    if kind not in BUILDS or "parameters" not in metadata:
        raise ReproduceError(f"{path} records no build recipe (metadata 'build' and 'parameters')",
                             hint="only artifacts written by innerguard build can be reproduced")
    try:
        params = BUILDS[kind][0].from_dict(json.loads(metadata["parameters"]))
        recorded = json.loads(metadata.get("data_sha256") or "{}")
    except (ValueError, TypeError) as exc:
        raise ReproduceError(f"{path}: unreadable recipe ({exc})") from None
    return Recipe(params, metadata, _find_inputs(params, recorded, Path(path)))


def _find_inputs(params: Params, recorded: dict[str, str], artifact_path: Path) -> dict[str, str]:
    found = {}
    for name, given in params.input_files().items():
        want = recorded.get(given)
        if want is None:
            raise ReproduceError(f"the recipe names {given} ({name}) but records no hash for it")
        candidates = [Path(given)] if Path(given).is_absolute() else \
            [Path(given), *(parent / given for parent in artifact_path.resolve().parents)]
        existing = [c for c in candidates if c.is_file()]
        if not existing:
            raise ReproduceError(f"data file {given} not found (looked in the current folder and above {artifact_path})",
                                 hint="run from the folder the build ran in")
        match = next((c for c in existing if artifact.file_sha256(c) == want), None)
        if match is None:
            raise ReproduceError(f"data file {existing[0]} changed since the build: sha256 {artifact.file_sha256(existing[0])[:16]}…, "
                                 f"recorded {want[:16]}…", hint="restore the recorded data to reproduce")
        found[given] = str(match)
    if isinstance(params, HeadsParams) and not params.data and not params.protocol:
        want = recorded.get(BUILTIN)
        have = artifact.file_sha256(PROTOCOL_FILE)
        if want != have:
            raise ReproduceError(f"the built-in protocol file changed since the build: sha256 {have[:16]}…, recorded "
                                 f"{str(want)[:16]}…", hint="build with --protocol FILE holding the recorded texts")
    return found


def rebuild(target, recipe: Recipe, out: str, *, progress: bool = False) -> tuple[Built, str]:
    """Run the recorded build on ``target`` and write it to ``out`` with the
    recorded date and command line. Returns (built, file sha256)."""
    params, metadata = recipe.params, recipe.metadata
    fingerprint = models.read_geometry(_model_dir(target)).fingerprint
    if metadata.get("model_fingerprint") and fingerprint != metadata["model_fingerprint"]:
        raise ReproduceError(f"the model is not the recorded checkpoint (fingerprint {fingerprint[:12]}…, recorded "
                             f"{metadata['model_fingerprint'][:12]}…)")
    located = replace(params, **{name: recipe.inputs[given] for name, given in params.input_files().items()})
    built = BUILDS[params.kind][1](target, located, progress=progress)
    # Record what the original recorded: its paths, its parameters, its --out.
    back = {found: given for given, found in recipe.inputs.items()}
    built.params = params
    built.data_sha256 = {back.get(k, k): v for k, v in built.data_sha256.items()}
    epoch = int(metadata["source_date_epoch"]) if metadata.get("source_date_epoch") else None
    saved = save(built, out, epoch=epoch, record_out=_recorded_out(metadata))
    return built, saved.file_sha256


def compare(artifact_path: str, rebuilt_path: str) -> Comparison:
    old, old_meta = artifact.read(artifact_path)
    new, new_meta = artifact.read(rebuilt_path)
    result = Comparison(artifact_path, rebuilt_path, artifact.content_sha256(old), artifact.content_sha256(new),
                        artifact.file_sha256(artifact_path), artifact.file_sha256(rebuilt_path))
    recorded = old_meta.get("content_sha256")
    if recorded and recorded != result.artifact_content:
        result.warnings.append(f"{artifact_path}: its tensors do not match the content_sha256 its metadata records "
                               f"({recorded[:16]}…): the file was changed after the build")
    for name in sorted(set(old) | set(new)):
        result.tensors.append(_diff(name, old.get(name), new.get(name)))
    return result


def _diff(name: str, a: torch.Tensor | None, b: torch.Tensor | None) -> TensorDiff:
    if a is None or b is None:
        return TensorDiff(name, False, "only in the " + ("rebuilt" if a is None else "recorded") + " artifact")
    if a.dtype != b.dtype or a.shape != b.shape:
        detail = f"{a.dtype} {list(a.shape)} recorded, {b.dtype} {list(b.shape)} rebuilt"
        if name == "heads" and a.dim() == 2 == b.dim():
            detail += "; " + _heads_change(a, b)
        return TensorDiff(name, False, detail)
    if torch.equal(a, b):
        return TensorDiff(name, True, "identical")
    if name == "heads":
        return TensorDiff(name, False, _heads_change(a, b))
    diff = (a.double() - b.double()).abs()
    scale = float(a.double().abs().max()) or 1.0
    return TensorDiff(name, False, f"max abs diff {float(diff.max()):.3g} (relative to max |value| {float(diff.max()) / scale:.3g}), "
                                   f"{int((diff > 0).sum())}/{a.numel()} values differ")


def _heads_change(a: torch.Tensor, b: torch.Tensor) -> str:
    old = {tuple(r) for r in a.tolist()}
    new = {tuple(r) for r in b.tolist()}
    return f"heads added {sorted(new - old)}, removed {sorted(old - new)}"


def _recorded_out(metadata: dict[str, str]) -> str | None:
    import shlex

    argv = shlex.split(metadata.get("command", ""))
    return argv[argv.index("--out") + 1] if "--out" in argv[:-1] else None


def _model_dir(target) -> Path:
    from innerguard.engine.build.engine import model_dir_of

    return model_dir_of(target)


def reproduce(target, path: str, *, out: str | None = None, progress: bool = False) -> Comparison:
    recipe = read_recipe(path)
    with tempfile.TemporaryDirectory(prefix="innerguard-reproduce-") as tmp:
        rebuilt = out or str(Path(tmp) / Path(path).name)
        built, _ = rebuild(target, recipe, rebuilt, progress=progress)
        result = compare(path, rebuilt)
        result.report = built.report
        if out is None:
            result.rebuilt = "(not kept; pass --out FILE)"
    return result


__all__ = ["BUILDS", "Comparison", "Recipe", "ReproduceError", "compare", "read_recipe", "rebuild", "reproduce"]
