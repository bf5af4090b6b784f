"""Constants and small data cuts shared by the build tests."""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "artifacts"
EPOCH = "1700000000"  # SOURCE_DATE_EPOCH of every test build


def subset(source: str, target: Path, pick) -> Path:
    """The rows of data/artifacts/SOURCE that ``pick(index, row)`` accepts."""
    lines = (DATA / source).read_text("utf-8").splitlines()
    target.write_text("".join(line + "\n" for i, line in enumerate(lines) if pick(i, json.loads(line))), "utf-8")
    return target
