"""The test policy "decode": a token probe on the generated tokens
(``span: generated``) with the shipped injection probe's weights, read by a
``stop`` rule. What it scores does not matter here, only that the worker
computes exactly what the Hugging Face reference does, and that a stop cuts
where its window starts. Selected by name, or by the tag "decode".

The test policy "decode-focus": an attention tracker on the generated tokens
(the shipped injection heads' share of span attention that goes toward the
system prompt), read by a ``stop`` rule; selected by the tag "decode-focus"."""
from __future__ import annotations

from pathlib import Path

TOKEN_PROBE_ARTIFACT = "smollm2-135m-instruct.injection-token-probe.safetensors"
HEADS_ARTIFACT = "smollm2-135m-instruct.injection-heads.safetensors"
DECODE_WINDOW = 16
FOCUS_WINDOW = 4
DECODE_POLICY = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {{name: decode, version: 1.0.0}}
mode: {mode}
applies_to: {{tags: [decode]}}
signals:
  written:
    analyzer: token_probe
    layers: [3, 6, 9, 12, 15, 18, 21, 24, 27]
    window: %d
    span: generated
    weights:
      artifact: artifacts/%s
rules:
  - id: stop-written
    when: written > {threshold!r}
    action: stop
    message: Stopped by {{{{ rule.id }}}} at {{{{ signals.written | round(3) }}}}.
""" % (DECODE_WINDOW, TOKEN_PROBE_ARTIFACT)


FOCUS_POLICY = """\
apiVersion: innerguard/v1
kind: Policy
metadata: {{name: decode-focus, version: 1.0.0}}
applies_to: {{tags: [decode-focus]}}
spans:
  trusted: {{roles: [system]}}
  untrusted: {{roles: [user]}}
signals:
  reads_system:
    analyzer: attention_tracker
    span: generated
    toward: trusted
    window: %d
    heads:
      artifact: artifacts/%s
rules:
  - id: stop-reading-system
    when: reads_system >= {threshold!r}
    action: stop
""" % (FOCUS_WINDOW, HEADS_ARTIFACT)


def copy_decode_artifacts(shipped: Path, folder: Path) -> None:
    """The shipped artifacts the two policies read, into ``folder``'s artifacts."""
    import shutil

    (folder / "artifacts").mkdir(exist_ok=True)
    for name in (TOKEN_PROBE_ARTIFACT, HEADS_ARTIFACT):
        shutil.copy(shipped / "artifacts" / name, folder / "artifacts" / name)


def decode_policy(threshold: float = 1e9, mode: str = "enforce") -> str:
    return DECODE_POLICY.format(threshold=threshold, mode=mode)


def decode_steer_policy(threshold: float, vector: str, layer: int, coefficient: float) -> str:
    """The "decode" policy whose rule steers instead of stopping: from the
    token after the step where ``written > threshold`` first holds."""
    head, _ = DECODE_POLICY.split("rules:\n")
    return head.format(mode="enforce") + (
        "rules:\n"
        "  - id: steer-written\n"
        f"    when: written > {threshold!r}\n"
        "    action: steer\n"
        f"    steer: {{vector: {{artifact: artifacts/{vector}}}, layer: {layer}, coefficient: {coefficient}, positions: generated}}\n"
    )


def focus_policy(threshold: float = 1.0) -> str:
    """At 1.0 (every span-attention of the window's tokens on the system
    prompt, none on the user's message) the rule never fires in practice."""
    return FOCUS_POLICY.format(threshold=threshold)


def reference_decode_focus(reference, heads_artifact: Path, prompt_ids, completion_ids, system: tuple[int, int],
                           user: tuple[int, int]) -> list[float]:
    """The attention tracker's value of each completion token but the last,
    teacher forced, from Hugging Face's attention weights."""
    from safetensors.torch import load_file

    from innerguard.engine.reference.scores import reference_generated_focus

    heads = [tuple(int(v) for v in pair) for pair in load_file(str(heads_artifact))["heads"].tolist()]
    start = len(prompt_ids)
    return reference_generated_focus(reference[0], list(prompt_ids) + list(completion_ids), [system], [user], heads,
                                     (start, start + len(completion_ids) - 1))


def reference_decode_scores(reference, artifact: Path, prompt_ids, completion_ids) -> list[float]:
    """The Hugging Face path, teacher forced: the prompt and the completion
    run as one sequence, and each completion token but the last (the engine
    never computes the last one's hidden state) is scored."""
    from safetensors.torch import load_file

    from innerguard.engine.reference.scores import reference_token_scores

    tensors = load_file(str(artifact))
    weights = {int(k.split(".")[1]): t for k, t in tensors.items() if k.startswith("weight.")}
    start = len(prompt_ids)
    return reference_token_scores(reference[0], list(prompt_ids) + list(completion_ids), weights,
                                  float(tensors["bias"][0]), [(start, start + len(completion_ids) - 1)])


def firing(scores: list[float], window: int) -> tuple[int, float]:
    """A number of scored tokens k (past the first window) at which the
    pooled value (read once a whole window is scored) first exceeds every
    earlier one by a margin, and a threshold between the two: a rule
    ``> threshold`` fires exactly once k tokens are scored, on the window of
    the last ``window`` of them (its first token is where the cut falls)."""
    import torch

    from innerguard.hooks.analyzers.token_probe import window_max

    def pooled(k):
        return window_max(torch.tensor(scores[:k], dtype=torch.float64), window)

    for k in range(window + 4, len(scores) + 1):
        before = pooled(k - 1)  # the largest window before the k-th token's
        if pooled(k) > before + 1e-3:
            return k, (pooled(k) + before) / 2
    raise AssertionError("the pooled score never rose past the first window: pick another prompt")
