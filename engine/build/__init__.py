"""Build the artifacts policies read (heads, steering vectors, probes, token
probes) from data, through innerguard's own capture path inside vLLM.

    from innerguard.engine.build import HeadsParams, build_heads, save
    built = build_heads(llm, HeadsParams(model="smollm2-135m-instruct"))
    save(built, "heads.safetensors")

``llm`` is an engine that records (``innerguard.engine.build.engine``);
each build returns a ``Built`` (tensors, metadata, report lines, figures)
and ``save`` writes it with its recipe. ``reproduce`` re-runs a recorded
recipe and compares. CLI: ``innerguard build --help``.
"""
from innerguard.engine.build.data import BuildDataError
from innerguard.engine.build.heads import HeadsParams, build_heads
from innerguard.engine.build.probe import ProbeParams, build_probe
from innerguard.engine.build.recipe import Built, Saved, save
from innerguard.engine.build.token_probe import TokenProbeParams, build_token_probe
from innerguard.engine.build.reproduce import Comparison, ReproduceError, compare, read_recipe, rebuild, reproduce
from innerguard.engine.build.vector import SweepParams, VectorParams, build_vector, sweep

__all__ = [
    "BuildDataError", "Built", "Comparison", "HeadsParams", "ProbeParams", "ReproduceError", "Saved", "SweepParams",
    "TokenProbeParams", "VectorParams", "build_heads", "build_probe", "build_token_probe", "build_vector", "compare",
    "read_recipe", "rebuild", "reproduce", "save", "sweep",
]
