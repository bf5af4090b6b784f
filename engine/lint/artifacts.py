"""Artifact checks: where the file is, what it is, and what it holds.

Convention for artifacts (documented in docs/policy-language.md#artifacts):

- safetensors only; the path is relative to the policy file and must stay
  inside the policy file's folder (no absolute paths, no '..', no symlinks
  that lead outside);
- heads artifacts: an integer tensor (key ``heads`` by default) of shape
  [n, 2] holding (layer, head) pairs; ``__metadata__`` gives ``model_name``,
  ``num_layers``, ``num_heads``;
- vector artifacts: a 1-D float tensor (key ``vector`` by default) of length
  hidden_size; ``__metadata__`` gives ``model_name``, ``hidden_size``,
  ``layer`` (where it was extracted);
- optional ``model_fingerprint`` (``innerguard.engine.models.fingerprint``)
  pins the exact checkpoint.

Model names compare case-insensitively on their last path segment, so
``HuggingFaceTB/SmolLM2-135M-Instruct`` matches ``smollm2-135m-instruct``.
Headers are parsed here (8-byte length + JSON), without loading tensors;
only small tensors (a heads table, a probe's bias) are read, with ``struct``,
so that linting and compiling need neither torch nor numpy.
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from innerguard.engine.policy.lint_rules import make
from innerguard.engine.plan import ModelGeometry
from innerguard.engine.policy.diagnostics import Finding, Location
from innerguard.engine.policy.model import ArtifactRef, Policy, TokenProbeSignal
from innerguard.engine.policy.yamlsafe import Marks

MAKE_HINT = ("build it with: innerguard build heads|vector|probe|token-probe (innerguard build --help); "
             "the shipped artifacts' recipes: data/artifacts/README.md")
MAX_HEADER = 16 << 20
PICKLE_SUFFIXES = {".pt", ".pth", ".bin", ".pkl", ".pickle", ".ckpt", ".npy", ".npz", ".joblib"}
INT_DTYPES = {"I64": "q", "I32": "i", "I16": "h", "I8": "b", "U8": "B", "U16": "H", "U32": "I", "U64": "Q"}
FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}
MAX_HEADS = 100_000


@dataclass
class Header:
    tensors: dict[str, dict[str, Any]]
    metadata: dict[str, str]
    data_start: int
    path: Path


@dataclass
class ArtifactCache:
    """Headers read once per lint run, by resolved path."""

    headers: dict[Path, Header | tuple[str, str]] = field(default_factory=dict)


def normalize_model_name(name: str) -> str:
    return str(name).rstrip("/").rsplit("/", 1)[-1].lower()


def check_location(ref: ArtifactRef, root: Path) -> tuple[str, str] | None:
    """(rule, message) if the path leaves the policy folder, else None."""
    raw = ref.path
    if PurePosixPath(raw).is_absolute() or PureWindowsPath(raw).is_absolute() or raw.startswith("~"):
        return "IG502", f"artifact path {raw!r} is absolute; use a path relative to the policy file"
    if ".." in PurePosixPath(raw.replace("\\", "/")).parts:
        return "IG502", f"artifact path {raw!r} leaves the policy folder ('..'); keep artifacts next to the policy"
    real_root = os.path.realpath(root)
    real = os.path.realpath(root / raw)
    if os.path.commonpath([real_root, real]) != real_root:
        return "IG503", f"artifact {raw!r} is a symlink (or inside one) that resolves outside the policy folder, to {real}"
    return None


def read_header(path: Path) -> Header | tuple[str, str]:
    """The safetensors header, or (rule, message) saying why not."""
    suffix = path.suffix.lower()
    if suffix in PICKLE_SUFFIXES:
        return "IG504", f"artifact {path.name} is a {suffix} file; pickled formats are refused (they can run code when loaded): convert it to safetensors"
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            size = os.fstat(fh.fileno()).st_size
            n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            raw = fh.read(n) if 0 < n <= MAX_HEADER and n + 8 <= size else b""
    except IsADirectoryError:
        return "IG505", f"artifact {path.name} is a folder, not a file"
    except OSError as exc:
        return "IG505", f"artifact {path.name} cannot be read: {exc.strerror or exc}"
    # Sniff pickles only when the file is not a safetensors file: a header
    # length can begin with the byte 0x80 too.
    if not raw.startswith(b"{"):
        if head[:1] == b"\x80" or head[:4] == b"PK\x03\x04":
            kind = "a pickle" if head[:1] == b"\x80" else "a torch.save/zip archive"
            return "IG504", f"artifact {path.name} is {kind}; pickled formats are refused (they can run code when loaded): convert it to safetensors"
        if len(head) < 8:
            return "IG505", f"artifact {path.name} is truncated ({size} bytes)"
        return "IG505", f"artifact {path.name} is not a valid safetensors file (its header length field is wrong)"
    if suffix != ".safetensors":
        return "IG504", f"artifact {path.name} is not named *.safetensors; only safetensors artifacts are accepted"
    try:
        header = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return "IG505", f"artifact {path.name} has an unreadable safetensors header (not JSON)"
    if not isinstance(header, dict):
        return "IG505", f"artifact {path.name} has an unreadable safetensors header"
    metadata = header.pop("__metadata__", None) or {}
    tensors = {k: v for k, v in header.items() if isinstance(v, dict) and "dtype" in v and "shape" in v and "data_offsets" in v}
    if len(tensors) != len(header) or not isinstance(metadata, dict):
        return "IG505", f"artifact {path.name} has a malformed safetensors header"
    return Header(tensors, {str(k): str(v) for k, v in metadata.items()}, 8 + n, path)


def read_int_pairs(header: Header, key: str) -> list[tuple[int, int]] | None:
    info = header.tensors[key]
    fmt = INT_DTYPES[info["dtype"]]
    start, end = info["data_offsets"]
    count = info["shape"][0] * 2
    with open(header.path, "rb") as fh:
        fh.seek(header.data_start + start)
        raw = fh.read(end - start)
    if len(raw) != struct.calcsize(f"<{count}{fmt}"):
        return None
    values = struct.unpack(f"<{count}{fmt}", raw)
    return list(zip(values[0::2], values[1::2]))


def read_floats(header: Header, key: str, limit: int = 1024) -> list[float] | None:
    """A small float tensor's values, flattened (a probe's bias), or None when
    it is not a float tensor of at most ``limit`` values or its bytes are short."""
    info = header.tensors.get(key)
    if info is None or info["dtype"] not in FLOAT_DTYPES:
        return None
    count = 1
    for size in info["shape"]:
        count *= int(size)
    if count > limit:
        return None
    start, end = info["data_offsets"]
    with open(header.path, "rb") as fh:
        fh.seek(header.data_start + start)
        raw = fh.read(end - start)
    if info["dtype"] == "BF16":  # the high half of a float32
        if len(raw) != 2 * count:
            return None
        return [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
    fmt = {"F64": "d", "F32": "f", "F16": "e"}[info["dtype"]]
    if len(raw) != struct.calcsize(f"<{count}{fmt}"):
        return None
    return list(struct.unpack(f"<{count}{fmt}", raw))


class ArtifactChecker:
    def __init__(self, policy: Policy, marks: Marks, geometry: ModelGeometry | None, model_name: str | None, cache: ArtifactCache):
        self.policy = policy
        self.marks = marks
        self.geometry = geometry
        self.model_name = model_name
        self.cache = cache
        self.findings: list[Finding] = []

    def add(self, rule: str, message: str, loc: Location) -> None:
        self.findings.append(make(rule, message, loc))

    def check(self, ref: ArtifactRef, kind: str, path: tuple, layers: tuple[int, ...]) -> None:
        loc = self.marks.at(path + ("artifact",))
        problem = check_location(ref, self.policy.root)
        if problem:
            self.add(*problem, loc)
            return
        if not ref.resolved.exists():
            if ref.resolved.is_symlink():
                self.add("IG501", f"artifact {ref.path!r} is a broken symlink", loc)
            else:
                self.add("IG501", f"artifact {ref.path!r} does not exist ({MAKE_HINT})", loc)
            return
        header = self.cache.headers.get(ref.resolved)
        if header is None:
            header = self.cache.headers[ref.resolved] = read_header(ref.resolved)
        if isinstance(header, tuple):
            self.add(*header, loc)
            return
        key_loc = self.marks.at(path + ("key",)) if (path + ("key",)) in self.marks.values else loc
        if ref.key not in header.tensors:
            present = ", ".join(sorted(header.tensors)) or "none"
            self.add("IG506", f"artifact {ref.path!r} has no tensor {ref.key!r} (tensors: {present})", key_loc)
            return
        info = header.tensors[ref.key]
        self.check_metadata(ref, header, kind, loc)
        if kind == "heads":
            self.check_heads(ref, header, info, loc)
        else:
            self.check_vector(ref, header, info, loc, layers, path)

    def check_metadata(self, ref: ArtifactRef, header: Header, kind: str, loc: Location) -> None:
        meta = header.metadata
        wanted = ("model_name", "num_layers", "num_heads") if kind == "heads" else ("model_name", "hidden_size", "layer")
        # A multi-layer artifact (a token probe) names its layers as "layers": "6,12,18".
        missing = [k for k in wanted if k not in meta and not (k == "layer" and "layers" in meta)]
        if missing:
            self.add("IG508", f"artifact {ref.path!r} lacks metadata {', '.join(missing)} (which model is it for?)", loc)
        name = meta.get("model_name")
        if name and self.model_name and normalize_model_name(name) != normalize_model_name(self.model_name):
            self.add("IG509", f"artifact {ref.path!r} was made for model {name!r}, not {self.model_name!r}", loc)
        g = self.geometry
        if g is None:
            return
        for key, actual in (("num_layers", g.num_layers), ("num_heads", g.num_heads), ("hidden_size", g.hidden_size)):
            if key in meta and _int(meta[key]) != actual:
                self.add("IG509", f"artifact {ref.path!r} says {key}={meta[key]}, but the model has {actual}", loc)
        fp = meta.get("model_fingerprint")
        if fp and g.fingerprint and fp != g.fingerprint:
            self.add("IG509", f"artifact {ref.path!r} was made for a different checkpoint (model_fingerprint {fp[:12]}…, model {g.fingerprint[:12]}…)", loc)

    def check_heads(self, ref: ArtifactRef, header: Header, info: dict, loc: Location) -> None:
        shape = info["shape"]
        if info["dtype"] not in INT_DTYPES or len(shape) != 2 or shape[1] != 2 or shape[0] < 1:
            self.add("IG507", f"heads tensor {ref.key!r} in {ref.path!r} must be integers of shape [n, 2] (layer, head), found {info['dtype']} {shape}", loc)
            return
        if shape[0] > MAX_HEADS:
            self.add("IG507", f"heads tensor {ref.key!r} in {ref.path!r} lists {shape[0]} heads; at most {MAX_HEADS}", loc)
            return
        try:
            pairs = read_int_pairs(header, ref.key)
        except OSError as exc:
            self.add("IG505", f"artifact {ref.path!r} cannot be read: {exc}", loc)
            return
        if pairs is None:
            self.add("IG505", f"artifact {ref.path!r}: tensor {ref.key!r} is truncated", loc)
            return
        layers = self.geometry.num_layers if self.geometry else _int(header.metadata.get("num_layers"))
        heads = self.geometry.num_heads if self.geometry else _int(header.metadata.get("num_heads"))
        source = "the model" if self.geometry else "the artifact's metadata"
        for layer, head in pairs:
            if layer < 0 or head < 0 or (layers is not None and layer >= layers) or (heads is not None and head >= heads):
                self.add("IG511", f"heads artifact {ref.path!r} lists [{layer}, {head}], outside {source} ({layers} layers x {heads} heads)", loc)
                return

    def check_vector(self, ref: ArtifactRef, header: Header, info: dict, loc: Location, layers: tuple[int, ...], path: tuple) -> None:
        shape = info["shape"]
        if info["dtype"] not in FLOAT_DTYPES or len(shape) != 1:
            self.add("IG507", f"vector {ref.key!r} in {ref.path!r} must be a 1-D float tensor, found {info['dtype']} {shape}", loc)
            return
        hidden = self.geometry.hidden_size if self.geometry else _int(header.metadata.get("hidden_size"))
        if hidden is not None and shape[0] != hidden:
            source = "the model's hidden size" if self.geometry else "hidden_size in its metadata"
            self.add("IG510", f"vector {ref.key!r} in {ref.path!r} has {shape[0]} elements, but {source} is {hidden}", loc)
        made_at = _int(header.metadata.get("layer"))
        if made_at is not None and layers and made_at not in layers:
            self.add("IG305", f"vector {ref.path!r} was extracted at layer {made_at}, but is used at layer {', '.join(map(str, layers))}", loc)
        made_for = [_int(v) for v in str(header.metadata.get("layers", "")).split(",") if v.strip()]
        if made_for and None not in made_for and layers and not set(layers) <= set(made_for):
            self.add("IG305", f"artifact {ref.path!r} was fitted at layers {', '.join(map(str, made_for))}, but is used at "
                              f"layer {', '.join(map(str, layers))}", loc)


    def check_pooling(self, signal: TokenProbeSignal) -> None:
        """The signal pools the token scores as the artifact was fitted to be pooled."""
        header = self.cache.headers.get(signal.weights.resolved)
        if not isinstance(header, Header):
            return  # missing or unreadable: reported by check()
        loc = self.marks.at(("signals", signal.name), key=True)
        fitted_window = _int(header.metadata.get("window"))
        if fitted_window is not None and fitted_window != signal.window:
            self.add("IG306", f"token probe {signal.name!r} pools windows of {signal.window} tokens, but "
                              f"{signal.weights.path!r} was fitted with window {fitted_window}", loc)
        fitted_adjust = _float(header.metadata.get("length_adjust", "0"))
        if fitted_adjust is not None and abs(fitted_adjust - signal.length_adjust) > 5e-5:
            self.add("IG306", f"token probe {signal.name!r} has length_adjust {signal.length_adjust:g}, but "
                              f"{signal.weights.path!r} was fitted with length_adjust {fitted_adjust:g}", loc)


def _float(value: Any) -> float | None:
    try:
        return float(str(value))
    except (TypeError, ValueError):
        return None


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None
