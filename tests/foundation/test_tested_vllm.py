"""The vLLM releases innerguard says it is tested on are the ones that the
package pins, the CI lanes install and the running engine warns about."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

from innerguard.engine import vllm_engine

ROOT = Path(__file__).resolve().parents[2]


def _pins() -> set[str]:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pinned = set()
    for requirement in extras["cpu"] + extras["gpu"]:
        match = re.fullmatch(r"vllm(?:-cpu)?==([0-9.]+)", requirement)
        if match:
            pinned.add(match.group(1))
    return pinned


def _lane_release() -> str:
    script = (ROOT / "scripts" / "test_vllm_lane.sh").read_text()
    return re.search(r'INNERGUARD_LANE_VLLM:-([0-9.]+)', script).group(1)


def test_the_tested_releases_are_the_pinned_ones_and_the_lanes():
    assert set(vllm_engine.TESTED_VLLM) == _pins() | {_lane_release()}


def test_ci_runs_the_second_lane():
    assert "test_vllm_lane.sh" in (ROOT / ".ci" / "run").read_text() + (ROOT / "Makefile").read_text()


def test_an_untested_release_is_warned_about_once(capsys):
    vllm_engine._warn_if_untested.cache_clear()
    vllm_engine._warn_if_untested("0.99.0")
    vllm_engine._warn_if_untested("0.99.0")
    vllm_engine._warn_if_untested("0.32.0+cpu")
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert text.count("not a release innerguard is tested on") == 1
    assert "0.99.0" in text
