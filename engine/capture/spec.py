"""What to capture: layers, Q/K heads, token mode, generated tokens, dtype.

A ``CaptureSpec`` is what a caller asks for (``layers="all"`` allowed); its
``resolve(geometry)`` checks it against the model and returns the explicit
form that the worker receives and the manifest records.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Literal, Sequence

from innerguard.engine.errors import InnerguardError
from innerguard.engine.plan import ModelGeometry

Mode = Literal["last_token", "all_tokens"]
DTYPES = ("float32", "float16", "bfloat16")


class CaptureSpecError(InnerguardError):
    pass


@dataclass(frozen=True)
class CaptureSpec:
    """``layers``: residual stream after these decoder layers (0-based; HF's
    ``output_hidden_states[L + 1]``), or ``"all"``. ``qk``: (layer, heads)
    pairs: post-RoPE Q of those query heads at the kept rows, and K of their
    KV heads at every computed row (attention needs every key).
    ``mode``: ``last_token`` keeps the last prompt token (and, with
    ``generated``, every generated token's row); ``all_tokens`` keeps every
    prompt row (and generated rows with ``generated``). ``dtype``: the
    stored precision; the cast happens on the device, before the copy."""

    layers: tuple[int, ...] | Literal["all"] = ()
    qk: tuple[tuple[int, tuple[int, ...]], ...] = ()
    mode: Mode = "last_token"
    generated: bool = False
    dtype: str = "float32"
    max_tokens: int | None = None  # default: 1, or 16 with ``generated``

    def resolve(self, geometry: ModelGeometry) -> "CaptureSpec":
        if self.mode not in ("last_token", "all_tokens"):
            raise CaptureSpecError(f"unknown mode {self.mode!r}", hint="use last_token or all_tokens")
        if self.dtype not in DTYPES:
            raise CaptureSpecError(f"unknown dtype {self.dtype!r}", hint=f"use one of {', '.join(DTYPES)}")
        n = geometry.num_layers
        layers = tuple(range(n)) if self.layers == "all" else tuple(sorted({int(x) for x in self.layers}))
        bad = [x for x in layers if not 0 <= x < n]
        if bad:
            raise CaptureSpecError(f"layers {bad} outside 0..{n - 1} ({geometry.architecture} has {n} decoder layers)")
        merged: dict[int, set[int]] = {}
        for layer, heads in self.qk:
            if not 0 <= int(layer) < n:
                raise CaptureSpecError(f"Q/K layer {layer} outside 0..{n - 1}")
            wrong = [h for h in heads if not 0 <= int(h) < geometry.num_heads]
            if wrong:
                raise CaptureSpecError(f"layer {layer}: heads {wrong} outside 0..{geometry.num_heads - 1}")
            merged.setdefault(int(layer), set()).update(int(h) for h in heads)
        if not layers and not merged:
            raise CaptureSpecError("nothing to capture", hint="give --layers and/or --qk-heads")
        max_tokens = self.max_tokens if self.max_tokens is not None else (16 if self.generated else 1)
        if max_tokens < 1:
            raise CaptureSpecError("max_tokens must be at least 1")
        return CaptureSpec(
            layers=layers,
            qk=tuple((layer, tuple(sorted(h))) for layer, h in sorted(merged.items())),
            mode=self.mode,
            generated=self.generated,
            dtype=self.dtype,
            max_tokens=max_tokens,
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["layers"] = self.layers if self.layers == "all" else list(self.layers)
        data["qk"] = [[layer, list(heads)] for layer, heads in self.qk]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CaptureSpec":
        layers = data.get("layers") or ()
        return cls(
            layers="all" if layers == "all" else tuple(int(x) for x in layers),
            qk=tuple((int(layer), tuple(int(h) for h in heads)) for layer, heads in data.get("qk") or ()),
            mode=data.get("mode", "last_token"),
            generated=bool(data.get("generated", False)),
            dtype=data.get("dtype", "float32"),
            max_tokens=data.get("max_tokens"),
        )

    def worker_spec(self, max_bytes: int) -> dict[str, Any]:
        """What ``innerguard_record_start`` receives (a resolved spec)."""
        return {"layers": list(self.layers), "qk": [[layer, list(h)] for layer, h in self.qk], "mode": self.mode,
                "generated": self.generated, "dtype": self.dtype, "max_bytes": int(max_bytes)}

    def bytes_per_request(self, geometry: ModelGeometry, prompt_tokens: int) -> int:
        """An upper bound of what one request's capture holds (resolved spec)."""
        width = 4 if self.dtype == "float32" else 2
        generated = (self.max_tokens or 1) if self.generated else 0
        rows = (prompt_tokens if self.mode == "all_tokens" else 1) + generated
        k_rows = prompt_tokens + generated
        size = len(self.layers) * rows * geometry.hidden_size * width + 8 * rows + (8 * k_rows if self.qk else 0)
        group = geometry.num_heads // geometry.num_kv_heads
        for _, heads in self.qk:
            size += rows * len(heads) * geometry.head_dim * width
            size += k_rows * len({h // group for h in heads}) * geometry.head_dim * width
        return size


def parse_layers(values: Sequence[str] | None) -> tuple[int, ...] | Literal["all"]:
    """``--layers 0 5 29`` or ``--layers all`` (also ``0,5,29`` and ranges ``10-14``)."""
    if not values:
        return ()
    if len(values) == 1 and values[0].strip().lower() == "all":
        return "all"
    out: list[int] = []
    for value in _split(values):
        if "-" in value.strip("-"):
            lo, hi = value.split("-", 1)
            out += range(_int(lo, "layer"), _int(hi, "layer") + 1)
        else:
            out.append(_int(value, "layer"))
    return tuple(out)


def parse_qk_heads(values: Sequence[str] | None) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """``--qk-heads 13:0 13:4 15:1,2`` -> ((13, (0, 4)), (15, (1, 2)))."""
    merged: dict[int, list[int]] = {}
    for value in _split(values or (), sep=" "):
        layer, sep, heads = value.partition(":")
        if not sep or not heads:
            raise CaptureSpecError(f"--qk-heads {value!r} is not LAYER:HEAD[,HEAD...]", hint="e.g. --qk-heads 13:0 15:1,2")
        merged.setdefault(_int(layer, "layer"), []).extend(_int(h, "head") for h in heads.split(","))
    return tuple((layer, tuple(heads)) for layer, heads in merged.items())


def _split(values: Iterable[str], sep: str = ",") -> list[str]:
    return [part for value in values for part in str(value).replace(sep, " ").split() if part]


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise CaptureSpecError(f"{what} {text!r} is not an integer") from None
