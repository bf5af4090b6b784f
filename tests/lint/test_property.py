"""Whatever bytes or documents it is fed, the linter returns findings (or
none) and never raises or reports an internal error."""
from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from innerguard.engine.lint import lint_paths
from test_bad_policies import BLOCK_LOW, FOCUS, HEAD

VALID = yaml.safe_load(HEAD + FOCUS + "rules:\n" + BLOCK_LOW + "  - id: f\n    when: focus > 0.9 and not (focus < 0.95)\n    action: flag\n    message: 'x {{ signals.focus }}'\n")
KEYS = ["apiVersion", "kind", "metadata", "name", "version", "signals", "rules", "when", "action", "heads", "analyzer",
        "steer", "vector", "artifact", "layer", "pattern", "mode", "on_error", "spans", "roles", "message", "focus", "id"]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30), st.sampled_from(["focus < 0.4", "block", "steer", "attention_tracker", "probe", "text",
                                             "reranker", "(a+)+", "../x.safetensors", "{{ x }}", "max(focus) <", "innerguard/v1"]),
)
documents = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=5), st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=10)), children, max_size=6)),
    max_leaves=40,
)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def lint_bytes(raw: bytes):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "p.yaml"
        path.write_bytes(raw)
        report = lint_paths([path])
    assert not report.internal_error, [str(f) for f in report.findings]
    return report


@SETTINGS
@given(st.binary(max_size=400))
def test_random_bytes(raw):
    lint_bytes(raw)


@SETTINGS
@given(documents)
def test_random_documents(doc):
    lint_bytes(yaml.safe_dump(doc, allow_unicode=True).encode("utf-8"))


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


ALL_PATHS = [p for p in _paths(VALID) if p]


@SETTINGS
@given(st.sampled_from(ALL_PATHS), documents)
def test_valid_policy_with_one_value_replaced(path, replacement):
    import copy

    doc = copy.deepcopy(VALID)
    target = doc
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = replacement
    lint_bytes(yaml.safe_dump(doc, allow_unicode=True).encode("utf-8"))


@SETTINGS
@given(st.lists(st.sampled_from(list("focus<>=!()0.5-1, ") + ["and ", " or ", "not ", "max(", "count(", "focus", "true", "1e9", ">="]), max_size=20))
def test_random_conditions(parts):
    when = "".join(parts)
    doc = dict(VALID, rules=[{"id": "r", "when": when, "action": "block"}])
    lint_bytes(yaml.safe_dump(doc).encode())


@SETTINGS
@given(st.text(max_size=60))
def test_random_text_in_a_policy(text):
    raw = (HEAD + FOCUS + "rules:\n" + BLOCK_LOW).encode()
    lint_bytes(raw + text.encode("utf-8", "surrogatepass"))
