"""A build's recipe: its parameters, the command line that states them, the
data files it read (path and sha256), and the metadata every built
artifact carries.

Metadata keys written by every build (safetensors metadata is strings):

    build             heads | vector | probe | token-probe
    protocol          what the tensors are and how they were computed (words)
    parameters        the build parameters, JSON (what ``build reproduce`` re-runs)
    command           the same as an ``innerguard build`` command line
    data_sha256       JSON {path: sha256 of the file's bytes} of every input file
    seed              the seed of the build's random choices (samples, splits)
    model_name, model_fingerprint, hidden_size (+ num_layers, num_heads, layer as the kind needs)
    built_at, source_date_epoch, builder, format     (see ``artifact.provenance``)
    content_sha256    sha256 of the tensors (names, dtypes, shapes, bytes)
    report            JSON of the figures the build printed
"""
from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import torch

from innerguard.engine.build import artifact
from innerguard.engine import models


@dataclass
class Params:
    """Base of each build's parameters; subclasses set ``kind`` and ``FLAGS``."""

    kind: ClassVar[str] = ""
    FLAGS: ClassVar[dict[str, str]] = {}  # field -> CLI flag
    INPUTS: ClassVar[tuple[str, ...]] = ()  # fields that name data files
    LIST_SEP: ClassVar[str] = ":"  # how the command line writes a list (A:B ranges; layer lists use ",")

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Params":
        names = {f.name for f in fields(cls)}
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items() if k in names})

    def command(self, out: str | None) -> str:
        argv = ["innerguard", "build", self.kind]
        for name, flag in self.FLAGS.items():
            value = getattr(self, name)
            if value is None or value is False:
                continue
            if value is True:
                argv.append(flag)
            elif isinstance(value, (tuple, list)):
                argv += [flag, self.LIST_SEP.join(str(v) for v in value)]
            else:
                argv += [flag, _text(value)]
        if out:
            argv += ["--out", out]
        return shlex.join(argv)

    def input_files(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in self.INPUTS if getattr(self, name)}


@dataclass
class Built:
    """What a build produced, before it is written."""

    params: Params
    tensors: dict[str, torch.Tensor]
    metadata: dict[str, str]  # kind-specific (model geometry keys, protocol, figures ...)
    report: list[str] = field(default_factory=list)  # the lines the command prints
    figures: dict[str, Any] = field(default_factory=dict)
    data_sha256: dict[str, str] = field(default_factory=dict)  # path -> sha256 of what was read


@dataclass(frozen=True)
class Saved:
    path: str
    file_sha256: str
    content_sha256: str
    metadata: dict[str, str]


def model_metadata(params: Params, model_dir: Path) -> dict[str, str]:
    geometry = models.read_geometry(model_dir)
    return {
        "model_name": Path(str(params.model)).name,
        "model_fingerprint": geometry.fingerprint,
        "hidden_size": str(geometry.hidden_size),
        "num_layers": str(geometry.num_layers),
        "num_heads": str(geometry.num_heads),
    }


def full_metadata(built: Built, out: str | None, epoch: int | None = None) -> dict[str, str]:
    epoch = artifact.source_date_epoch() if epoch is None else epoch
    return {
        **built.metadata,
        **artifact.provenance(epoch),
        "build": built.params.kind,
        "parameters": json.dumps(built.params.to_dict(), sort_keys=True),
        "command": built.params.command(out),
        "data_sha256": json.dumps(built.data_sha256, sort_keys=True),
        "seed": str(getattr(built.params, "seed", "")),
        "content_sha256": artifact.content_sha256(built.tensors),
        "report": json.dumps(built.figures, sort_keys=True),
    }


def save(built: Built, out: str, *, epoch: int | None = None, record_out: str | None = None) -> Saved:
    """Write ``built`` to ``out``. ``record_out``: the --out the command line
    records (a reproduction writes elsewhere but records the original)."""
    metadata = full_metadata(built, record_out if record_out is not None else out, epoch)
    digest = artifact.write(out, built.tensors, metadata)
    return Saved(out, digest, metadata["content_sha256"], metadata)


def _text(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)
