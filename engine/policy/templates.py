"""Static analysis of message templates (for the linter and the model).

Templates are parsed in the same sandboxed environment that renders them
(``innerguard.engine.policy.vocabulary.template_environment``), so what lints clean
parses at request time too.
"""
from __future__ import annotations

from dataclasses import dataclass

from jinja2 import TemplateSyntaxError, meta, nodes

from innerguard.engine.policy.vocabulary import TEMPLATE_VARIABLES, template_environment

_ENV = template_environment()


@dataclass(frozen=True)
class TemplateReport:
    error: str | None = None
    error_line: int = 0  # 1-based line inside the template
    unknown_variables: tuple[str, ...] = ()
    unknown_attributes: tuple[tuple[str, str], ...] = ()  # (variable, attribute)
    signals: tuple[str, ...] = ()


def analyze(source: str) -> TemplateReport:
    try:
        tree = _ENV.parse(source)
    except TemplateSyntaxError as exc:
        return TemplateReport(error=exc.message or "syntax error", error_line=exc.lineno or 1)
    unknown = tuple(sorted(meta.find_undeclared_variables(tree) - set(TEMPLATE_VARIABLES)))
    signals: list[str] = []
    bad_attrs: list[tuple[str, str]] = []
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        if not isinstance(node.node, nodes.Name):
            continue
        var = node.node.name
        if isinstance(node, nodes.Getattr):
            attr = node.attr
        elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
            attr = node.arg.value
        else:
            continue
        if var == "signals":
            signals.append(attr)
        elif var in TEMPLATE_VARIABLES and attr not in TEMPLATE_VARIABLES[var]:
            bad_attrs.append((var, attr))
    return TemplateReport(unknown_variables=unknown, unknown_attributes=tuple(bad_attrs), signals=tuple(dict.fromkeys(signals)))


def template_signals(source: str) -> tuple[str, ...]:
    return analyze(source).signals
