"""The eval report's length groups: disjoint buckets up to 2,048 prompt
tokens, and the long prompts again as groups from 512 and 1,024 tokens up."""
from __future__ import annotations

from innerguard.engine.evaluate.report import RowResult, build_report, format_text
from innerguard.engine.evaluate.score import Score


def _row(i: int, tokens: int, label: int, blocked: bool) -> RowResult:
    return RowResult(id=f"r{i}", label=label, style="email", prompt_tokens=tokens, acted=blocked,
                     score=float(blocked), signals={"p.s": float(blocked)})


def test_long_prompts_are_reported_in_buckets_and_from_512_and_1024_up():
    rows = [_row(i, tokens, i % 2, blocked=bool(i % 2) or tokens >= 2048)
            for i, tokens in enumerate([50, 60, 300, 310, 700, 710, 1500, 1510, 3000, 3010])]
    report = build_report(rows, Score("p", ("p.s",), True, (0.5,)), policy_version="1", data="d")
    groups = report["by_length"]
    assert list(groups) == ["0-127", "256-511", "512-1023", "1024-2047", ">=2048", "all >=512", "all >=1024"]
    assert [groups[k]["n"] for k in ("512-1023", "1024-2047", ">=2048", "all >=512", "all >=1024")] == [2, 2, 2, 6, 4]
    assert groups[">=2048"]["fpr"] == 1.0 and groups["all >=512"]["fpr"] == 1 / 3 and groups["all >=1024"]["fpr"] == 0.5
    assert "all >=1024" in format_text(report)
