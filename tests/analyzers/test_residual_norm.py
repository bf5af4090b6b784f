"""An analyzer unit in the policy language: ``residual_norm``
(engine/analyzers/residual_norm.py), from the schema to the plan, and a
third party's unit through the entry-point group ``innerguard.analyzers``.
Its values inside vLLM are checked against its reference in
tests/runtime/test_runtime_parity.py."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib import resources
from pathlib import Path

import pytest

from innerguard.engine import analyzers as analyzer_units
from innerguard.engine.compiler import compile_policies
from innerguard.engine.lint import lint_paths
from innerguard.engine.policy.schema import with_analyzer_units

POLICY = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {{name: size, version: 1.0.0}}
mode: enforce
signals:
  size:
    analyzer: {analyzer}
{keys}
rules:
  - id: flag-large
    when: size > {threshold}
    action: flag
"""


def _policy(tmp_path: Path, keys: str, threshold: float = 3, analyzer: str = "residual_norm") -> Path:
    path = tmp_path / "size.yaml"
    path.write_text(POLICY.format(analyzer=analyzer, keys=textwrap.indent(keys, "    "), threshold=threshold))
    return path


def _findings(path: Path, model=None) -> list[tuple[str, int, str]]:
    return [(f.rule, f.location.line, f.message) for f in lint_paths([path], model=model and str(model)).findings]


def test_a_residual_norm_signal_compiles_to_its_capture(tmp_path, smollm2_dir):
    path = _policy(tmp_path, "layer: 12\nbaseline: 2.5")
    assert _findings(path, smollm2_dir) == []
    plan, needs = compile_policies([path], smollm2_dir)
    [spec] = plan.analyzers
    assert (spec.kind, spec.params) == ("residual_norm", {"layer": 12, "baseline": 2.5, "policy": "size", "residual_layers": [12]})
    assert [c.layer for c in plan.residual_captures] == [12]
    assert [(n.what, n.why) for n in needs] == [("residual stream after layer 12, last prompt token", "signal size.size (residual_norm)")]


def test_its_keys_are_checked_by_the_schema(tmp_path):
    path = _policy(tmp_path, "layer: 12\nbaseline: 0\nwindow: 4")
    assert _findings(path) == [
        ("IG105", 9, "signals.size.baseline: 0 is less than or equal to the minimum of 0"),
        ("IG101", 10, "unknown key 'window' in signals.size (allowed here: description, analyzer, layer, baseline)"),
    ]
    assert [rule for rule, _, _ in _findings(_policy(tmp_path, "baseline: 2"))] == ["IG102"]  # layer is required


def test_its_layer_is_checked_against_the_model(tmp_path, smollm2_dir):
    path = _policy(tmp_path, "layer: 30")
    [(rule, line, message)] = _findings(path, smollm2_dir)
    assert (rule, line) == ("IG601", 8)  # at the layer key
    assert message == "signal 'size': layer 30 is out of range; the model has layers 0..29"


def test_thresholds_are_checked_against_its_range(tmp_path):
    [(rule, _, message)] = _findings(_policy(tmp_path, "layer: 3", threshold=-1))
    assert rule == "IG204" and "outside the range of size (>= 0)" in message


def test_the_schema_file_lists_every_built_in_unit_as_the_unit_declares_it():
    # Editors read schemas/policy.schema.json directly: it must not lag the units.
    text = resources.files("innerguard.schemas").joinpath("policy.schema.json").read_text("utf-8")
    assert with_analyzer_units(json.loads(text)) == json.loads(text)
    listed = json.loads(text)["$defs"]["signal"]["properties"]["analyzer"]["enum"]
    assert set(analyzer_units.kinds()) <= set(listed)


THIRD_PARTY = '''
import math
from innerguard.engine.analyzers import Analyzer, Needs

class LastTokenMean(Analyzer):
    kind = "last_token_mean"
    summary = "Mean of the residual stream after 'layer' at the last prompt token."
    keys = {"layer": {"type": "integer", "minimum": 0}}
    required = ("layer",)
    value_range = (-math.inf, math.inf)

    def needs(self, params):
        return Needs(f"residual stream after layer {params['layer']}, last prompt token", residual_layers=(params["layer"],))

    def compute(self, params, captures):
        return captures.residual_last[params["layer"]].mean()
'''

LINT_AND_COMPILE = """
import json, sys
from innerguard.engine.compiler import compile_policies
plan, needs = compile_policies([sys.argv[1]], sys.argv[2])
print(json.dumps([[a.kind, a.params["layer"]] for a in plan.analyzers] + [[c.layer for c in plan.residual_captures]]))
"""


@pytest.fixture
def third_party_site(tmp_path) -> Path:
    """An installed distribution (as pip leaves one) that registers one
    analyzer unit and one entry point that does not load."""
    site = tmp_path / "site"
    info = site / "thirdparty_analyzer-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "thirdparty_analyzer.py").write_text(THIRD_PARTY)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-analyzer\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[innerguard.analyzers]\nlast_token_mean = thirdparty_analyzer:LastTokenMean\n"
                                           "broken = thirdparty_analyzer:NoSuchClass\n")
    return site


def test_a_third_party_unit_registers_through_the_entry_point_group(tmp_path, smollm2_dir, third_party_site):
    policy = _policy(tmp_path, "layer: 5", threshold=0.5, analyzer="last_token_mean")
    run = subprocess.run([sys.executable, "-c", LINT_AND_COMPILE, str(policy), str(smollm2_dir)],
                         capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(third_party_site), "PATH": ""})
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == [["last_token_mean", 5], [5]]
    # The broken entry point is left out with one line that names it; the rest goes on.
    broken = [line for line in run.stdout.splitlines() + run.stderr.splitlines() if "'broken'" in line]
    assert len(broken) == 1 and "left out" in broken[0] and "NoSuchClass" in broken[0]


def test_without_the_distribution_its_analyzer_is_unknown(tmp_path):
    [(rule, line, message)] = _findings(_policy(tmp_path, "layer: 5", analyzer="last_token_mean"))
    assert (rule, line) == ("IG104", 7)
    assert message.endswith("is 'last_token_mean'; allowed: attention_tracker, probe, token_probe, reranker, text, residual_norm")
