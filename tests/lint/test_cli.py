"""``innerguard lint`` as users run it: exit codes, formats, --explain."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from innerguard.engine.policy.lint_rules import RULES
from test_bad_policies import BLOCK_LOW, FOCUS, HEAD

EXE = Path(sys.executable).parent / "innerguard"
GOOD = HEAD + FOCUS + "rules:\n" + BLOCK_LOW


def lint(*args, cwd=None):
    return subprocess.run([str(EXE), "lint", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=60)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    (root / "good").mkdir()
    (root / "good" / "p.yaml").write_text(GOOD)
    (root / "warn").mkdir()
    (root / "warn" / "p.yaml").write_text(GOOD + "  - id: lower\n    when: focus < 0.2\n    action: flag\n")
    (root / "bad").mkdir()
    (root / "bad" / "p.yaml").write_text(GOOD.replace("focus < 0.4", "fokus < 0.4"))
    (root / "empty").mkdir()
    return root


def test_clean_policy_exits_0(folder):
    r = lint(folder / "good")
    assert r.returncode == 0 and "0 error(s), 0 warning(s)" in r.stdout


def test_warnings_alone_exit_0(folder):
    r = lint(folder / "warn")
    assert r.returncode == 0 and "IG207" in r.stdout


def test_errors_exit_1_with_one_line_per_finding(folder):
    r = lint(folder / "bad" / "p.yaml")
    assert r.returncode == 1
    first = r.stdout.splitlines()[0]
    assert first.startswith(f"{folder / 'bad' / 'p.yaml'}:15:11: error IG202 ")
    assert "did you mean 'focus'" in first


def test_empty_folder_exits_1(folder):
    assert lint(folder / "empty").returncode == 1


@pytest.mark.parametrize("args, message", [
    (["/no/such/dir"], "no such file or folder"),
    (["--explain", "IG999"], "unknown rule id"),
    ([], "no policy files given"),
    (["--model", "/no/such/model", "."], "model"),
])
def test_user_errors_exit_2_with_one_line_and_no_traceback(folder, args, message):
    r = lint(*args, cwd=folder / "good")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("innerguard: error:") and message in lines[0]


def test_explain_prints_title_explanation_and_fix():
    r = lint("--explain", "ig205")
    assert r.returncode == 0
    assert r.stdout.startswith("IG205 (error): rule can never fire")
    assert "How to fix:" in r.stdout


def test_json_output_shape(folder):
    r = lint("--format", "json", folder / "bad")
    data = json.loads(r.stdout)
    assert data["summary"] == {"files": 1, "errors": 1, "warnings": 0, "infos": 0}
    (finding,) = data["findings"]
    assert finding == {
        "file": str(folder / "bad" / "p.yaml"), "line": 15, "column": 11, "severity": "error",
        "rule": "IG202", "title": RULES["IG202"].title, "message": finding["message"],
    }


def test_sarif_output_is_valid_enough_for_code_scanning(folder):
    r = lint("--format", "sarif", "bad", cwd=folder)
    assert r.returncode == 1
    sarif = json.loads(r.stdout)
    assert sarif["version"] == "2.1.0" and "sarif" in sarif["$schema"]
    (run,) = sarif["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "innerguard"
    ids = [rule["id"] for rule in driver["rules"]]
    assert ids == sorted(RULES)
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"] and rule["help"]["text"]
        assert rule["defaultConfiguration"]["level"] in ("error", "warning", "note")
    (result,) = run["results"]
    assert result["ruleId"] == "IG202" and ids[result["ruleIndex"]] == "IG202"
    assert result["level"] == "error" and result["message"]["text"]
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "bad/p.yaml", "uriBaseId": "%SRCROOT%"}
    assert location["region"] == {"startLine": 15, "startColumn": 11}


def test_pre_commit_hook_definition_runs_the_linter():
    import yaml

    hooks = yaml.safe_load((Path(__file__).resolve().parents[2] / ".pre-commit-hooks.yaml").read_text())
    assert hooks[0]["id"] == "innerguard-lint" and hooks[0]["entry"] == "innerguard lint"


def test_lint_rules_doc_is_generated_from_the_registry():
    from innerguard.engine.policy.lint_rules import markdown

    doc = Path(__file__).resolve().parents[2] / "docs" / "lint-rules.md"
    assert doc.read_text() == markdown(), "regenerate: python -m innerguard.engine.policy.lint_rules > docs/lint-rules.md"
