"""Every lint rule innerguard knows: id, default severity, title, why it
matters, and how to fix it. ``innerguard lint --explain IG205`` prints an
entry; ``docs/lint-rules.md`` is generated from this table
(``python -m innerguard.engine.policy.lint_rules > docs/lint-rules.md``).

Ranges: IG0xx reading the file, IG1xx schema, IG2xx conditions and rules,
IG3xx actions and templates, IG4xx regular expressions, IG5xx artifacts,
IG6xx model geometry, IG7xx the policy set, IG9xx the linter itself.
"""
from __future__ import annotations

from dataclasses import dataclass

from innerguard.engine.policy.diagnostics import Finding, Location, Severity

E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO


@dataclass(frozen=True)
class RuleInfo:
    id: str
    severity: Severity
    title: str
    explanation: str
    fix: str

    def render(self) -> str:
        return (
            f"{self.id} ({self.severity.value}): {self.title}\n\n"
            f"{self.explanation}\n\nHow to fix: {self.fix}\n"
        )


_RULES = [
    # -- reading the file ---------------------------------------------------
    RuleInfo("IG001", E, "file cannot be read",
             "The policy file exists but cannot be opened or read (permissions, a broken symlink, a folder where a file was expected).",
             "Check the path and its permissions."),
    RuleInfo("IG002", E, "file is not UTF-8",
             "Policy files are UTF-8 text. A byte that is not valid UTF-8 usually means the file was saved in another encoding or is not a policy at all.",
             "Re-save the file as UTF-8 (the finding names the first bad byte)."),
    RuleInfo("IG003", E, "file is empty",
             "The file has no YAML content (only whitespace or comments). An empty policy protects nothing and is almost always a mistake.",
             "Write the policy, or delete the file."),
    RuleInfo("IG004", E, "file is too large",
             "Policies are limited to 1 MiB. Larger files are refused before parsing, so that a mistaken or hostile file cannot exhaust the linter or the engine.",
             "Split the policy, or move data (vectors, head lists) into safetensors artifacts."),
    RuleInfo("IG005", E, "YAML syntax error",
             "The file is not valid YAML, or uses YAML features policies do not allow (explicit tags such as !!python/object, non-string keys, dangling aliases).",
             "Fix the YAML at the reported line; use plain mappings, lists and scalars."),
    RuleInfo("IG006", E, "tab in indentation",
             "YAML forbids tabs for indentation; parsers either fail or read a structure different from what the file looks like.",
             "Indent with spaces (two per level is conventional)."),
    RuleInfo("IG007", E, "duplicate key",
             "A mapping has the same key twice. Standard YAML loaders silently keep the last one, so half of what the author wrote would be ignored: a typo-level mistake that can disable a guardrail.",
             "Remove or merge one of the two entries."),
    RuleInfo("IG008", E, "too many aliases (alias bomb)",
             "The document uses more than 100 aliases or expands to more than 20,000 nodes. Nested anchors can make a tiny file expand exponentially (the 'billion laughs' attack).",
             "Write the values out; policies rarely need anchors at all."),
    RuleInfo("IG009", E, "nesting too deep",
             "The document nests more than 32 levels of mappings/lists. No valid policy needs that; deep nesting is a way to crash parsers.",
             "Flatten the document."),
    RuleInfo("IG010", E, "more than one YAML document",
             "A policy file holds exactly one policy (one YAML document). Extra documents after '---' would be ignored by some tools and read by others.",
             "Put each policy in its own file."),
    RuleInfo("IG011", E, "no policy files found",
             "A path given to the linter is a folder without any *.yaml or *.yml file, so nothing was checked. In CI this usually means the wrong folder.",
             "Pass the folder that holds the policies, or the policy files themselves."),
    # -- schema ------------------------------------------------------------
    RuleInfo("IG101", E, "unknown key",
             "The key is not part of the policy language at this place. Unknown keys are errors, never ignored: a misspelt 'threshhold' or 'on_eror' would otherwise silently leave a default in force.",
             "Use the suggested key (did-you-mean), or see docs/policy-language.md and the schema for the keys allowed here."),
    RuleInfo("IG102", E, "required key missing",
             "A key that the policy language requires at this place is absent.",
             "Add the key named in the message."),
    RuleInfo("IG103", E, "wrong type",
             "The value has the wrong type (e.g. a string where a number is expected, a single value where a list is expected).",
             "Write the value with the type named in the message; quote strings that YAML would read as numbers or booleans."),
    RuleInfo("IG104", E, "value not allowed",
             "The value is not one of the values allowed here (an enumeration such as mode or action, or the apiVersion).",
             "Use one of the listed values (the message suggests the closest one)."),
    RuleInfo("IG105", E, "value out of bounds or malformed",
             "The value breaks a constraint of the schema: a number out of its range, a name that does not match the naming pattern, an empty list, and so on.",
             "Change the value to satisfy the constraint in the message."),
    # -- conditions and rules ------------------------------------------------
    RuleInfo("IG201", E, "condition syntax error",
             "A rule's 'when' condition cannot be parsed. Conditions use a small grammar: comparisons (<, <=, >, >=, ==, !=) between a signal (or max/min/mean/count of a vector signal) and a number, bare boolean signals, and/or/not and parentheses.",
             "Fix the condition at the reported column; see docs/policy-language.md#conditions."),
    RuleInfo("IG202", E, "undefined signal",
             "A condition or template names a signal that the policy does not define under 'signals'.",
             "Define the signal, or fix its name (the message suggests the closest one)."),
    RuleInfo("IG203", E, "signal used with the wrong type",
             "A signal is used in a way its analyzer's output does not support: a numeric score used as a boolean, a document-relevance vector compared without max/min/mean/count/any/all, an aggregate applied to a scalar, or a boolean compared with a number.",
             "Compare numeric signals with a threshold (focus < 0.4), aggregate vectors (max(relevance) < 0.3), and use text signals bare (jailbreak_phrase)."),
    RuleInfo("IG204", E, "threshold outside the signal's range",
             "The threshold lies outside the range the analyzer can produce (focus and probabilities are in [0, 1], cosine similarity in [-1, 1], counts are >= 0). The comparison is then constant, so the rule either always or never fires.",
             "Use a threshold inside the signal's range."),
    RuleInfo("IG205", E, "rule can never fire",
             "The condition is unsatisfiable: e.g. 'a < 0.2 and a > 0.5', 'focus < 0', or 'x and not x'. A guardrail that can never trigger protects nothing.",
             "Fix the comparison directions or thresholds."),
    RuleInfo("IG206", W, "rule always fires",
             "The condition is true for every possible signal value (e.g. 'focus >= 0', 'a or not a'). If that is intended, write 'when: true' to say so.",
             "Fix the condition, or write 'when: true'."),
    RuleInfo("IG207", W, "rule is shadowed",
             "Whenever this rule fires, a 'block' rule of the same policy also fires, so this rule's action can never take effect (block wins over every other action).",
             "Tighten the block rule, move this rule to its own policy, or delete it."),
    RuleInfo("IG208", E, "duplicate rule id",
             "Two rules in one policy have the same id. Decisions and audit records name the rule that fired, so ids must be unique within a policy.",
             "Rename one of the rules."),
    RuleInfo("IG209", W, "unused signal",
             "A signal is defined but no rule uses it. It still costs an analyzer pass at inference time.",
             "Use it in a rule, or remove it."),
    RuleInfo("IG210", E, "action parameters missing or misplaced",
             "The rule's action needs parameters it does not have (steer needs 'steer:'), or the rule carries parameters of another action (a 'steer:' block on a flag rule), which would be silently ignored.",
             "Add the parameters the action needs, or remove the ones that belong to another action."),
    RuleInfo("IG211", E, "condition too complex",
             "The condition is longer than 2,000 characters or nests more than 32 levels. Rules run for every request; keep them readable.",
             "Split the rule, or move logic into a signal."),
    RuleInfo("IG212", W, "duplicate rule",
             "Two rules of a policy have the same condition and the same action; the second adds nothing.",
             "Delete one of them."),
    RuleInfo("IG213", E, "output rule misused",
             "A rule that reads a signal with span 'generated' is an output rule: it is evaluated on what the model has written so far, after every generated token (or every 'output.every' tokens for text signals). A rule on the generated text can only stop the generation or flag it; a rule on in-model signals of the generated tokens (token_probe, attention_tracker), evaluated in the worker, can also steer from the next token on. Prompt signals are decided at prefill, before any output exists, so one rule cannot read both, and 'stop' needs something generated to stop on.",
             "Give output rules only 'generated' signals and action stop or flag (steer too, on in-model signals only); put prompt conditions in a rule of their own (block, steer, flag)."),
    RuleInfo("IG214", W, "output settings without an output rule",
             "The policy's 'output' block (hold_back, every) says how its output rules read a generation, but none of its rules reads a signal with span 'generated', so the block changes nothing.",
             "Delete the 'output' block, or add a rule on a 'generated' text signal."),
    RuleInfo("IG215", W, "hold-back shorter than a decode window",
             "A token_probe or attention_tracker with span 'generated' is read in the worker, one step after each token was sampled, and judged at the step after that; a stop cuts the completion where the window that fired begins, and the engine may see two more tokens before it learns of the stop. A stream sends a token once it is older than 'output.hold_back' tokens, so with a hold-back of the window plus one or less the first tokens of the violating window may already have been sent when the rule stops the generation. Without 'hold_back', a policy with such a signal holds back two more tokens than its longest window.",
             "Set output.hold_back to at least the window plus two (or leave it out), or use a smaller window."),
    # -- actions and templates -------------------------------------------
    RuleInfo("IG301", E, "invalid message template",
             "A block or flag message is a Jinja2 template and it does not parse.",
             "Fix the template syntax ({{ variable }}, {% if %}...{% endif %})."),
    RuleInfo("IG302", E, "template uses an undocumented variable",
             "Message templates run in a sandbox and see only 'policy' (name, version, owner, mode), 'rule' (id, action) and 'signals' (this policy's signal values by short name). Other variables fail at request time.",
             "Use only the documented variables."),
    RuleInfo("IG303", E, "template names an unknown signal",
             "The template reads signals.<name> for a signal the policy does not define.",
             "Define the signal, or fix its name."),
    RuleInfo("IG304", E, "conflicting steer rules",
             "Two steer rules act on the same layer with different methods (add vs project). Steers on one layer compose by summing 'add' vectors in priority order; an 'add' and a 'project' on the same layer have no well-defined combined meaning.",
             "Use one method per layer, or move one steer to another layer."),
    RuleInfo("IG305", W, "vector used at another layer than it was made for",
             "A steering or concept vector's metadata says it was extracted at another layer than the one the policy uses it at. Residual-stream scales differ a lot between layers (on SmolLM2 the norm jumps ~10x after layer 12), so a vector usually works only near the layer it came from.",
             "Use the layer in the artifact's metadata, or regenerate the vector for this layer."),
    RuleInfo("IG306", W, "token probe pooled otherwise than it was fitted",
             "A token_probe signal's window or length_adjust differs from what its weights artifact records (metadata 'window', 'length_adjust'). The threshold that 'innerguard build token-probe' printed holds for the pooling it was fitted with: another window, or a length_adjust added, dropped or changed, moves every score.",
             "Copy window and length_adjust from the build's output (or the artifact's metadata) into the signal, or rebuild the probe for the pooling you want."),
    # -- regular expressions ----------------------------------------------
    RuleInfo("IG401", E, "invalid regular expression",
             "A text signal's regex does not compile.",
             "Fix the pattern (the message shows the parser's complaint)."),
    RuleInfo("IG402", E, "regex feature unsupported by RE2",
             "Text signals are evaluated with RE2, which runs in linear time and therefore has no backreferences (\\1) and no lookaround ((?=, (?!, (?<=, (?<!).",
             "Rewrite the pattern without these features, or split it into several text signals combined with and/or/not."),
    RuleInfo("IG403", W, "regex at risk of catastrophic backtracking",
             "The pattern nests quantifiers ((a+)+, (a*)*, (a|a)*) or repeats overlapping alternatives. innerguard runs it with RE2 in linear time, but the same pattern in a backtracking engine (Python re, PCRE, most editors and SIEMs) can take exponential time, and such patterns rarely mean what their author intended.",
             "Remove the nested quantifier (e.g. (a+)+ -> a+)."),
    RuleInfo("IG404", W, "regex matches the empty string",
             "The pattern matches an empty string, so the text signal is true for every prompt.",
             "Make the pattern require at least one character."),
    # -- artifacts -----------------------------------------------------------
    RuleInfo("IG501", E, "artifact missing",
             "A referenced artifact file does not exist. Artifact paths are relative to the policy file. innerguard's own artifacts are built by innerguard build (heads, vector, probe) from the data in data/artifacts/; each records its recipe.",
             "Build the artifact (innerguard build heads|vector|probe|token-probe ... --out PATH) or fix the path."),
    RuleInfo("IG502", E, "artifact path escapes the policy folder",
             "Artifact paths must be relative and stay inside the policy file's folder: no absolute paths, no '..' segments. A policy bundle must be self-contained and must not read arbitrary files of the host.",
             "Copy the artifact next to the policy (e.g. artifacts/) and reference it relatively."),
    RuleInfo("IG503", E, "artifact symlink escapes the policy folder",
             "The artifact path is inside the policy folder, but it is (or passes through) a symbolic link that resolves outside of it.",
             "Replace the link with a copy of the file."),
    RuleInfo("IG504", E, "artifact is not safetensors",
             "Artifacts must be safetensors files (*.safetensors). Pickle-based formats (.pt, .pth, .bin, .pkl, torch.save zips) can execute code when loaded and are refused, always.",
             "Convert the tensor: safetensors.torch.save_file({'vector': t}, 'x.safetensors', metadata={...})."),
    RuleInfo("IG505", E, "artifact unreadable",
             "The file has a .safetensors name but its header cannot be read (truncated, corrupt, or not safetensors at all).",
             "Regenerate the artifact."),
    RuleInfo("IG506", E, "tensor missing from artifact",
             "The artifact does not contain the tensor key the policy names (default 'vector' for vectors, 'heads' for head lists).",
             "Fix 'key:' in the policy or regenerate the artifact; the message lists the keys present."),
    RuleInfo("IG507", E, "tensor has the wrong shape or dtype",
             "Head lists are integer tensors of shape [n, 2] (layer, head); vectors are 1-D floating-point tensors.",
             "Regenerate the artifact with the documented shape."),
    RuleInfo("IG508", W, "artifact metadata missing",
             "Artifacts should say which model they were made for in their safetensors __metadata__: model_name, and num_layers/num_heads (heads) or hidden_size/layer (vectors); optionally model_fingerprint. Without it, a vector made for another model is only caught when shapes happen to differ.",
             "Write the metadata when saving the artifact (see docs/policy-language.md#artifacts)."),
    RuleInfo("IG509", E, "artifact made for another model",
             "The artifact's metadata names a different model, fingerprint or geometry than the model being checked against (or than the policy's declared model). The fingerprint is a sha256 over the checkpoint's config.json, less the transformers_version its writer stamps, and its weight files' names and sizes; artifacts built before 2026-12-04 hashed config.json whole, so the same checkpoint prepared by another transformers release did not match.",
             "Regenerate the artifact for this model (innerguard build ... or innerguard build reproduce); an artifact from before 2026-12-04 made for this very checkpoint only needs its model_fingerprint rewritten to the model's (innerguard lint prints both)."),
    RuleInfo("IG510", E, "vector length differs from the hidden size",
             "A steering or concept vector must have exactly hidden_size elements (from --model, or from the artifact's own hidden_size metadata).",
             "Regenerate the vector for this model."),
    RuleInfo("IG511", E, "head index out of range",
             "A [layer, head] pair (inline or in a heads artifact) is outside the model's layers or heads, or outside what the artifact's own metadata declares.",
             "Select heads that exist in the model."),
    # -- model geometry --------------------------------------------------------
    RuleInfo("IG601", E, "layer out of range",
             "A layer index is not smaller than the model's number of layers (layers are 0-based).",
             "Use a layer in [0, num_layers)."),
    RuleInfo("IG602", I, "model not available; geometry checks skipped",
             "The policy names a model, but it is neither a local checkpoint folder nor a prepared known model, so layer/head/vector checks against the model were skipped.",
             "Run 'innerguard models prepare NAME' or pass --model DIR."),
    RuleInfo("IG603", W, "policy written for another model",
             "The policy's 'model' names a different model than --model.",
             "Lint against the model the policy was written for, or update 'model'."),
    RuleInfo("IG604", E, "analyzer not supported by the model's family",
             "The attention analyzers (attention_tracker, reranker) compute softmax(scale * q.k) over the whole prompt; families that soft-cap attention logits or give layers a sliding window (Gemma 2, Gemma 3) attend otherwise. 'innerguard models info' lists what a model supports.",
             "Use a probe or token_probe signal on this model, or an attention analyzer on a supported family."),
    RuleInfo("IG605", E, "signal does not fit the model",
             "An analyzer registered as a unit (innerguard.analyzers) checks its own signals against the model's geometry; the message is the analyzer's.",
             "Change the key the finding points at as the message says, or lint against the model the policy was written for."),
    # -- policy set ---------------------------------------------------------------
    RuleInfo("IG701", E, "duplicate policy name",
             "Two policy files declare the same metadata.name. Decisions and audit records identify policies by name.",
             "Rename one of the policies."),
    # -- the linter itself ---------------------------------------------------------
    RuleInfo("IG901", E, "internal linter error",
             "The linter failed on this file. This is a bug in innerguard, not in your policy.",
             "Report it with the file that triggers it."),
]

RULES: dict[str, RuleInfo] = {rule.id: rule for rule in _RULES}


def make(rule: str, message: str, location: Location, severity: Severity | None = None) -> Finding:
    """A finding for ``rule`` with the rule's default severity."""
    return Finding(rule, severity or RULES[rule].severity, message, location)


def explain(rule_id: str) -> str | None:
    info = RULES.get(rule_id.strip().upper())
    return info.render() if info else None


def markdown() -> str:
    lines = [
        "# innerguard lint rules",
        "",
        "Generated from `engine/policy/lint_rules.py` "
        "(`python -m innerguard.engine.policy.lint_rules > docs/lint-rules.md`). "
        "`innerguard lint --explain ID` prints one entry.",
        "",
        "| id | severity | title |",
        "|----|----------|-------|",
    ]
    lines += [f"| [{r.id}](#{r.id.lower()}) | {r.severity.value} | {r.title} |" for r in _RULES]
    for r in _RULES:
        lines += ["", f"## {r.id}", "", f"**{r.title}** ({r.severity.value})", "", r.explanation, "", f"*Fix:* {r.fix}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
