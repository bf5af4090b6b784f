"""The HTML report in a real browser: headless Chromium renders its charts and
tables for a log of mixed decisions (1,000 requests, one decision per shipped policy)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from audit_builders import KEY, decisions_per_request, write_log
from innerguard.engine.cli import main

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (CI must have it: apt-get install -y chromium)")
        pytest.skip("chromium is not installed (apt-get install -y chromium); CI runs this test")
    return found


@pytest.fixture(scope="module")
def report(tmp_path_factory, plan):
    folder = tmp_path_factory.mktemp("report")
    write_log(folder / "audit", 1000, spread_s=6 * 3600)
    key_file = folder / "key"
    key_file.write_text(KEY.hex())
    out = folder / "report.html"
    assert main(["audit", "report", str(folder / "audit"), "-o", str(out), "--key-file", str(key_file)]) == 0
    return out


def _browser(*args, timeout=120):
    done = subprocess.run([_chromium(), *CHROMIUM_FLAGS, *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_report_renders_its_charts_and_tables_in_chromium(report, shipped_probe):
    dom = _browser("--virtual-time-budget=5000", "--dump-dom", report.as_uri())
    assert 'data-status="ok"' in dom
    assert len(re.findall(r'<rect class="bar"', dom)) > 50  # the timeline's stacked bars
    histograms = re.findall(r'<svg class="chart histogram"', dom)
    assert len(histograms) >= 4
    assert re.search(rf'data-signal="prompt-injection.injected".*?data-threshold="{re.escape(shipped_probe.threshold)}"', dom, re.S)
    totals = dom.split('<table class="totals">')[1].split("</table>")[0]
    assert totals.count("<tr>") == 1 + decisions_per_request()  # header and one row per policy
    blocked = dom.split('<table class="blocked">')[1].split("</table>")[0]
    assert blocked.count("<tr>") > 100 and "injected=" in blocked
    assert dom.split('<table class="revisions">')[1].count("<tr>") >= 4


def test_the_report_paints_in_chromium(report, tmp_path):
    shot = tmp_path / "report.png"
    _browser(f"--screenshot={shot}", "--window-size=1400,3000", report.as_uri())
    assert shot.stat().st_size > 50_000  # a painted page of charts, not a blank one
