"""``build token-probe``: a linear probe on every token of the untrusted
data, pooled by its strongest window (the ``token_probe`` analyzer).

The analyzer scores token t of the data as s_t = Σ_L weight.L · h_L,t + bias
and the request as the largest mean of s_t over ``window`` consecutive data
tokens. Since that mean is linear, the probe is fitted on window means of
the concatenated residuals [h_L1; h_L2; ...]:

- label-1 rows: windows inside the inserted attack (``inserted`` character
  offsets of the row; windows that cover the whole attack when it is shorter
  than a window) are positive, windows that do not touch it are negative,
  windows across its edge are left out;
- label-0 rows (plain texts, human-addressed notes, benign traps): every
  window is negative.

At most ``--windows-per-row`` windows per row and class, evenly spaced, so
that long documents do not outweigh short rows. The residuals come from
vLLM through innerguard's capture path (``features.data_token_residuals``).

The threshold is chosen on ``--data`` only: grouped K-fold cross-validation
(rows that share a ``group``, e.g. an attack template or a corpus row, stay
in one fold; ``plain:*`` rows are free) gives each row an out-of-fold
request score (the window maximum, by the analyzer's own ``window_max``);
the threshold keeps their FPR at ``--target-fpr``. Rows marked
``"calibrate": false`` (texts over-represented on purpose, such as the
generated encoded strings of data/injection/fit.jsonl) are fitted on but do
not set the threshold; their out-of-fold FPR is reported on its own. The artifact's probe is
then fitted on every row. ``--hard-negatives N`` refits N times, each time
adding every row's highest-scoring negative window (the score is a maximum).

Memory: the build keeps every row's data tokens (float32, about 2.3 KB a token
and layer of SmolLM2-135M: about 7 GB at nine layers for data/injection/fit.jsonl).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import torch

from innerguard.engine.build import data as data_lib
from innerguard.engine.build import features, fit
from innerguard.engine.build.engine import model_dir_of
from innerguard.engine.build.recipe import Built, Params, model_metadata
from innerguard.engine import models
from innerguard.engine.evaluate.metrics import auroc, threshold_for_fpr, tpr_at_fpr
from innerguard.engine.spans import chat_spans, token_ranges
from innerguard.hooks.analyzers.token_probe import length_offset, window_count, window_max


FPR_UNITS = ("row", "text")
GENERATED_PROTOCOL = ("token-level logistic probe on the generated tokens (span: generated): s_t = sum_L weight.L . h_L,t "
                      "+ bias[0] on the residual stream after each layer L at every token of a given answer, teacher "
                      "forced after its prompt; signal = max over windows of the answer of mean s_t. Fitted on window "
                      "means: every window of a label-1 answer = 1, of a label-0 answer = 0, at most {per_row} evenly "
                      "spaced windows per row; L2-regularised logistic regression (LBFGS, l2 {l2:g}) on standardised "
                      "features")


@dataclass
class TokenProbeParams(Params):
    kind: ClassVar[str] = "token-probe"
    FLAGS: ClassVar[dict[str, str]] = {
        "model": "--model", "data": "--data", "layers": "--layers", "window": "--window", "target_fpr": "--target-fpr",
        "folds": "--folds", "windows_per_row": "--windows-per-row", "hard_negatives": "--hard-negatives", "l2": "--l2",
        "fpr_unit": "--fpr-unit", "length_adjust": "--length-adjust", "seed": "--seed", "generated": "--generated"}
    INPUTS: ClassVar[tuple[str, ...]] = ("data",)
    LIST_SEP: ClassVar[str] = ","

    model: str = ""
    data: str = ""
    layers: tuple[int, ...] = (6, 12, 18)
    window: int = 12
    target_fpr: float = 0.01
    folds: int = 5
    windows_per_row: int = 4
    hard_negatives: int = 0  # rounds of adding each row's highest-scoring negative window
    l2: float = 1e-2
    fpr_unit: str = "row"  # "text": the threshold's FPR counts distinct benign texts (each group once)
    length_adjust: bool = False  # fit the signal's length_adjust on the benign out-of-fold scores
    seed: int = 0
    generated: bool = False  # a probe for span: generated, on the tokens of the rows' completions

    def check(self, num_layers: int) -> None:
        bad = [layer for layer in self.layers if not 0 <= layer < num_layers]
        if not self.layers or bad or len(set(self.layers)) != len(self.layers):
            raise data_lib.BuildDataError(f"--layers {','.join(map(str, self.layers))}: give distinct layers in "
                                          f"0..{num_layers - 1}")
        for flag, value, low in (("--window", self.window, 1), ("--folds", self.folds, 2),
                                 ("--windows-per-row", self.windows_per_row, 1), ("--hard-negatives", self.hard_negatives, 0)):
            if value < low:
                raise data_lib.BuildDataError(f"{flag} {value}: must be at least {low}")
        if not 0 < self.target_fpr < 1:
            raise data_lib.BuildDataError(f"--target-fpr {self.target_fpr}: must be between 0 and 1")
        if self.l2 < 0:
            raise data_lib.BuildDataError(f"--l2 {self.l2}: must be at least 0")
        if self.fpr_unit not in FPR_UNITS:
            raise data_lib.BuildDataError(f"--fpr-unit {self.fpr_unit}: must be one of {', '.join(FPR_UNITS)}")
        if self.generated and self.length_adjust:
            raise data_lib.BuildDataError("--length-adjust applies to the prompt's data, not to --generated answers "
                                          "(a decode probe reads at most the answer's length)")


@dataclass
class _Row:
    label: int
    group: str
    style: str
    tokens: torch.Tensor  # [data tokens, layers * hidden] float32
    inserted: tuple[int, int] | None  # token range within the data
    calibrate: bool = True  # False: fitted on, but its score does not set the threshold


def inserted_rows(source: data_lib.DataFile) -> list[tuple[int, int] | None]:
    """Each row's ``inserted`` [start, end) character offsets into ``data``;
    label-1 rows must have them."""
    out = []
    for i, row in enumerate(source.rows):
        where = f"{source.path} row {i + 1} (id {row['id']})"
        value = row.get("inserted")
        if not isinstance(row.get("data"), str):
            raise data_lib.BuildDataError(f"{where}: a token probe needs 'instruction' and 'data' rows")
        if value is None:
            if row.get("label") == 1:
                raise data_lib.BuildDataError(f"{where}: label 1 needs 'inserted': [start, end) of the attack in 'data'",
                                              hint="scripts/build_injection_data.py writes it")
            out.append(None)
            continue
        if not (isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value)
                and 0 <= value[0] < value[1] <= len(row["data"])):
            raise data_lib.BuildDataError(f"{where}: 'inserted' must be [start, end) offsets into 'data'; got {value!r}")
        out.append((value[0], value[1]))
    return out


def _token_span(tokenizer, messages: list[dict], chars: tuple[int, int] | None, start: int, end: int) -> tuple[int, int] | None:
    """The inserted characters as a token range relative to the data message
    (prompt tokens ``[start, end)``), tokenised as the engine renders it."""
    if chars is None:
        return None
    spans = chat_spans(tokenizer, messages)
    data = spans.messages[-1]
    if (data.start, data.end) != (start, end):
        raise features.FeatureError(f"the chat template puts the data at tokens {data.start}..{data.end}, "
                                    f"the capture at {start}..{end}")
    at = spans.text.rfind(messages[-1]["content"])
    (a, b), = token_ranges(spans.offsets, [(at + chars[0], at + chars[1])])
    return a - start, b - start


def _starts(row: _Row, window: int) -> tuple[int, list[int], list[int]]:
    """(window length, first tokens of the positive windows, of the negative ones)."""
    n = len(row.tokens)
    w = min(window, n)
    starts = range(n - w + 1)
    if not row.label or row.inserted is None:
        return w, [], list(starts)
    a, b = row.inserted
    if b - a >= w:
        inside = [j for j in starts if a <= j and j + w <= b]
    else:  # a short attack: the windows that hold all of it
        inside = [j for j in starts if j <= a and b <= j + w]
    return w, inside, [j for j in starts if j + w <= a or j >= b]


def _window_mean(row: _Row, start: int, w: int) -> torch.Tensor:
    return row.tokens[start:start + w].double().mean(0).float()


def _windows(row: _Row, window: int, per_row: int) -> tuple[list[torch.Tensor], list[int]]:
    """Window means (features) and their labels, at most ``per_row`` per class."""
    w, inside, outside = _starts(row, window)
    chosen = [(j, 1) for j in _spread(inside, per_row)] + [(j, 0) for j in _spread(outside, per_row)]
    return [_window_mean(row, j, w) for j, _ in chosen], [y for _, y in chosen]


def _hardest_negative(row: _Row, window: int, weight: torch.Tensor, bias: float) -> torch.Tensor | None:
    """The mean of the negative window the probe scores highest (None if the row has none).
    A window's score is the mean of its tokens' scores (the probe is linear), so
    one matrix-vector product per row ranks every window; only the winner's
    features are averaged. (Averaging every window's features first cost a
    float64 copy of the row per call: minutes per fit on a few thousand
    long documents.)"""
    w, _, outside = _starts(row, window)
    if not outside:
        return None
    per_token = (row.tokens @ weight).double()
    sums = torch.cat([per_token.new_zeros(1), torch.cumsum(per_token, 0)])
    scores = (sums[w:] - sums[:-w])[outside]
    return _window_mean(row, outside[int(scores.argmax())], w)


def _spread(items: Sequence[int], k: int) -> list[int]:
    if len(items) <= k:
        return list(items)
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)] if k > 1 else [items[len(items) // 2]]


def _group_key(group: str, i: int) -> str:
    """Rows that share a group share a text or template; ``plain:*`` and
    ungrouped rows stand alone."""
    return f"row:{i}" if not group or group.startswith("plain") else group


def grouped_folds(groups: Sequence[str], k: int, seed: int) -> list[list[int]]:
    """k folds, each ``group`` whole in one of them (``plain:*`` rows each on
    their own): biggest groups first, each into the smallest fold so far."""
    members: dict[str, list[int]] = {}
    for i, group in enumerate(groups):
        members.setdefault(_group_key(group, i), []).append(i)
    keys = sorted(members)
    random.Random(seed).shuffle(keys)
    keys.sort(key=lambda g: -len(members[g]))  # stable: shuffled among groups of one size
    parts: list[list[int]] = [[] for _ in range(k)]
    for key in keys:
        min(parts, key=len).extend(members[key])
    return [sorted(p) for p in parts]


def _fit(rows: Sequence[_Row], params: TokenProbeParams) -> tuple[torch.Tensor, float, int, int]:
    x, y = [], []
    for row in rows:
        means, labels = _windows(row, params.window, params.windows_per_row)
        x += means
        y += labels
    if not 0 < sum(y) < len(y):
        raise data_lib.BuildDataError("the fitting windows hold only one class (are there label-1 rows with 'inserted'?)")
    weight, bias = fit.fit_logistic(torch.stack(x), torch.tensor(y, dtype=torch.float32), l2=params.l2)
    # The request score is a maximum: each round adds every row's highest-scoring negative window.
    for _ in range(params.hard_negatives):
        with fit.one_thread():
            hard = [m for m in (_hardest_negative(row, params.window, weight, bias) for row in rows) if m is not None]
        x += hard
        y += [0] * len(hard)
        weight, bias = fit.fit_logistic(torch.stack(x), torch.tensor(y, dtype=torch.float32), l2=params.l2)
    return weight, bias, sum(y), len(y) - sum(y)


def _score(row: _Row, weight: torch.Tensor, bias: float, window: int) -> float:
    with fit.one_thread():
        return window_max(row.tokens @ weight + bias, window)


def build_token_probe(target, params: TokenProbeParams, *, progress: bool = False) -> Built:
    model_dir = model_dir_of(target)
    geometry = models.read_geometry(model_dir)
    params.check(geometry.num_layers)
    source = data_lib.read_jsonl(params.data, "--data")
    rows = captured_rows(target, source, params.layers, generated=params.generated, window=params.window, progress=progress)
    return built_from_rows(rows, params, model_dir, source)


def built_from_rows(rows: Sequence[_Row], params: TokenProbeParams, model_dir, source: data_lib.DataFile,
                    fitted: Fitted | None = None) -> Built:
    """The artifact from captured rows (``captured_rows``): a caller that
    tries several settings on one capture builds each without capturing again,
    and passes ``fitted`` (``fit_rows(rows, params)``) when it already has it."""
    geometry = models.read_geometry(model_dir)
    fitted = fitted or fit_rows(rows, params)
    figures = fitted.figures
    report = _report(figures, params)
    if params.generated:
        figures["answers_left_out"] = len(source.rows) - len(rows)
        report.insert(1, f"{figures['answers_left_out']} answers shorter than the window left out (never judged live)")

    hidden = geometry.hidden_size
    tensors = {f"weight.{layer}": fitted.weight[i * hidden:(i + 1) * hidden].float().contiguous()
               for i, layer in enumerate(params.layers)}
    tensors["bias"] = torch.tensor([fitted.bias], dtype=torch.float32)
    metadata = {
        **{k: v for k, v in model_metadata(params, model_dir).items() if k != "num_heads"},
        "layers": ",".join(map(str, params.layers)),
        "window": str(params.window),
        **({"length_adjust": f"{fitted.length_adjust:.4f}"} if params.length_adjust else {}),
        "threshold": f"{fitted.threshold:.4f}",
        "threshold_rule": f"signal > threshold keeps the grouped {params.folds}-fold out-of-fold FPR on --data "
                          f"at or below {params.target_fpr:g}, counted over benign "
                          + ("rows" if params.fpr_unit == "row" else "texts (the rows of one group count once)"),
        "protocol": GENERATED_PROTOCOL.format(l2=params.l2, per_row=params.windows_per_row) if params.generated else
                    "token-level logistic probe: s_t = sum_L weight.L . h_L,t + bias[0] on the residual stream after "
                    "each layer L at every data token; signal = max over windows of the data of mean s_t. Fitted on "
                    "window means: inside the inserted attack = 1, benign rows and injected rows away from the "
                    f"attack = 0, at most {params.windows_per_row} evenly spaced windows per row and class; "
                    f"L2-regularised logistic regression (LBFGS, l2 {params.l2:g}) on standardised features",
        "samples": f"{figures['rows']} rows ({sum(r.label for r in rows)} label 1); {figures['windows_positive']} "
                   f"positive, {figures['windows_negative']} negative windows",
    }
    return Built(params, tensors, metadata, report, figures, {source.path: source.sha256})


def captured_rows(target, source: data_lib.DataFile, layers: Sequence[int], *, generated: bool = False,
                  window: int = 1, progress: bool = False) -> list[_Row]:
    """Every row's data-token residuals (inside vLLM) and its inserted span in
    tokens; ``generated``: the residuals of each row's completion instead,
    every window of a label-1 answer inside the "attack" (rows whose answer
    has fewer than ``window`` tokens are left out: the analyzer never judges
    them)."""
    messages, labels = data_lib.labelled(source)
    if generated:
        answers = data_lib.completions(source, "--generated")
        captured = features.answer_token_residuals(target, [m["messages"] for m in messages], answers, layers,
                                                   progress=progress, desc="answer tokens")
        rows = []
        for states, raw, label in zip(captured, source.rows, labels):
            n = states.shape[1]
            if n >= window:
                rows.append(_Row(label, str(raw.get("group", "")), str(raw.get("style", "-")),
                                 states.transpose(0, 1).reshape(n, -1), (0, n) if label else None))
        return rows
    inserted = inserted_rows(source)
    tokenizer = target.tokenizer if hasattr(target, "tokenizer") else target.get_tokenizer()
    rows = []
    captured = features.data_token_residuals(target, messages, layers, progress=progress, desc="data tokens")
    for (capture_row, start, states), raw, label, chars in zip(captured, source.rows, labels, inserted):
        span = _token_span(tokenizer, capture_row["messages"], chars, start, start + len(states))
        rows.append(_Row(label, str(raw.get("group", "")), str(raw.get("style", "-")), states.reshape(len(states), -1), span,
                         raw.get("calibrate", True) is not False))
    return rows


@dataclass
class Fitted:
    weight: torch.Tensor  # [layers * hidden]
    bias: float
    threshold: float
    oof: list[float]  # each row's out-of-fold request score (length-adjusted when length_adjust is set)
    figures: dict[str, Any]
    length_adjust: float = 0.0


def fit_rows(rows: Sequence[_Row], params: TokenProbeParams) -> Fitted:
    """Out-of-fold request scores choose the threshold; the probe is fitted on every row."""
    labels = [r.label for r in rows]
    parts = grouped_folds([r.group for r in rows], params.folds, params.seed)
    oof = [0.0] * len(rows)
    for part in parts:
        held = set(part)
        weight, bias, _, _ = _fit([r for i, r in enumerate(rows) if i not in held], params)
        for i in part:
            oof[i] = _score(rows[i], weight, bias, params.window)
    weight, bias, positives, negatives = _fit(rows, params)
    calibrating = [i for i, r in enumerate(rows) if r.calibrate]
    raw = list(oof)
    adjust = 0.0
    if params.length_adjust:
        benign = [i for i in calibrating if not labels[i]]
        adjust = fit_length_adjust([oof[i] for i in benign], [window_count(len(rows[i].tokens), params.window) for i in benign])
        oof = [s - length_offset(len(r.tokens), params.window, adjust) for s, r in zip(oof, rows)]
    weights = negative_weights([rows[i] for i in calibrating], params.fpr_unit)
    # Rounded as a policy writes it, so that the figures are those of the printed rule.
    threshold = round(threshold_for_fpr([oof[i] for i in calibrating], [labels[i] for i in calibrating],
                                        params.target_fpr, weights), 4)
    figures = _figures(rows, oof, labels, threshold, params)
    figures.update({"windows_positive": positives, "windows_negative": negatives, "rows": len(rows),
                    "data_tokens": sum(len(r.tokens) for r in rows), "length_adjust": adjust,
                    "benign_median_by_length": {"raw": _medians_by_length(rows, raw, labels, calibrating),
                                                "signal": _medians_by_length(rows, oof, labels, calibrating)}})
    return Fitted(weight, bias, threshold, oof, figures, adjust)


# Data-token buckets of the build's report, as innerguard eval prints them.
LENGTH_BUCKETS = ((0, 128), (128, 512), (512, 1024), (1024, 2048), (2048, None))
TAIL = 0.9  # the benign quantile whose slope length_adjust takes off


def fit_length_adjust(scores: Sequence[float], windows: Sequence[int], step: float = 0.005, most: float = 3.0) -> float:
    """The slope of the benign scores' 90th percentile against ln(number of
    windows): a linear quantile regression (pinball loss; for each slope on a
    grid the best intercept is that quantile of the residuals), at least 0.
    The tail, not the mean, is what a threshold cuts, so the tail is what
    must not move with length."""
    if len(scores) < 10:
        raise data_lib.BuildDataError(f"--length-adjust needs at least 10 benign rows that set the threshold; got {len(scores)}")
    x = torch.tensor([math.log(w) for w in windows], dtype=torch.float64)
    if float(x.max() - x.min()) < math.log(4):
        raise data_lib.BuildDataError("--length-adjust needs benign rows of several lengths (the longest with at "
                                      "least four times the windows of the shortest)")
    y = torch.tensor(list(scores), dtype=torch.float64)
    slopes = torch.arange(0.0, most + step / 2, step, dtype=torch.float64)
    residuals = y[None, :] - slopes[:, None] * x[None, :]  # [slopes, rows]
    intercepts = torch.quantile(residuals, TAIL, dim=1, keepdim=True)
    error = residuals - intercepts
    loss = torch.where(error >= 0, TAIL * error, (TAIL - 1) * error).sum(dim=1)
    return round(float(slopes[int(loss.argmin())]), 4)


def _medians_by_length(rows: Sequence[_Row], scores: Sequence[float], labels: Sequence[int], members: Sequence[int]) -> dict[str, float]:
    found: dict[str, float] = {}
    for low, high in LENGTH_BUCKETS:
        inside = sorted(scores[i] for i in members if not labels[i] and low <= len(rows[i].tokens) and (high is None or len(rows[i].tokens) < high))
        if inside:
            found[f"{low}-{high - 1}" if high else f">={low}"] = round(inside[len(inside) // 2], 4)
    return found


def negative_weights(rows: Sequence[_Row], unit: str) -> list[float]:
    """Each row's weight in the threshold's FPR. ``text``: the benign rows of
    one ``group`` (a corpus text in several carriers) share one unit, so that
    a hard text repeated many times does not set the threshold alone;
    ``plain:*`` and ungrouped rows are their own text."""
    if unit == "row":
        return [1.0] * len(rows)
    keys = [_group_key(r.group, i) for i, r in enumerate(rows)]
    sizes: dict[str, int] = {}
    for key, row in zip(keys, rows):
        if not row.label:
            sizes[key] = sizes.get(key, 0) + 1
    return [1.0 / sizes[key] if not row.label else 1.0 for key, row in zip(keys, rows)]


def _figures(rows: Sequence[_Row], oof: list[float], labels: list[int], threshold: float,
             params: TokenProbeParams) -> dict[str, Any]:
    """Out-of-fold figures on the calibrating rows; the others' FPR on its own."""
    kept = [i for i, r in enumerate(rows) if r.calibrate]
    neg = [i for i in kept if not labels[i]]
    pos = [i for i in kept if labels[i]]
    aside = [i for i, r in enumerate(rows) if not r.calibrate and not r.label]
    above = lambda members: round(sum(oof[i] > threshold for i in members) / len(members), 4)  # noqa: E731
    styles: dict[str, list[int]] = {}
    for i in neg:
        styles.setdefault(rows[i].style, []).append(i)
    scores, truth = [oof[i] for i in kept], [labels[i] for i in kept]
    weights = negative_weights([rows[i] for i in kept], "text")
    texts = sum(w for w, y in zip(weights, truth) if not y)
    return {
        "threshold": round(threshold, 4),
        "target_fpr": params.target_fpr,
        "cv_folds": params.folds,
        "cv_auroc": round(auroc(scores, truth) or float("nan"), 4),
        "cv_fpr": above(neg),
        "cv_fpr_texts": round(sum(w for w, s, y in zip(weights, scores, truth) if not y and s > threshold) / texts, 4),
        "fpr_unit": params.fpr_unit,
        "cv_tpr": above(pos),
        "cv_tpr_at_1pct_fpr": round(tpr_at_fpr(scores, truth, 0.01)[0], 4),
        "cv_tpr_at_5pct_fpr": round(tpr_at_fpr(scores, truth, 0.05)[0], 4),
        "cv_fpr_by_style": {style: above(members) for style, members in sorted(styles.items())},
        **({"cv_fpr_not_calibrating": above(aside), "rows_not_calibrating": len(rows) - len(kept)} if aside else {}),
    }


def _report(f: dict[str, Any], params: TokenProbeParams) -> list[str]:
    worst = sorted(f["cv_fpr_by_style"].items(), key=lambda kv: -kv[1])[:3]
    return [
        f"token probe at layers {','.join(map(str, params.layers))}, window {params.window}: fitted on {f['rows']} rows "
        f"({f['data_tokens']} {'answer' if params.generated else 'data'} tokens; {f['windows_positive']} positive, "
        f"{f['windows_negative']} negative windows), "
        f"l2 {params.l2:g}",
        f"grouped {params.folds}-fold CV (seed {params.seed}), out-of-fold request scores: AUROC {f['cv_auroc']:.4f}; "
        f"TPR {f['cv_tpr_at_1pct_fpr']:.3f} at 1 % FPR, {f['cv_tpr_at_5pct_fpr']:.3f} at 5 % FPR",
        f"threshold {f['threshold']:.4f} (out-of-fold FPR over benign {params.fpr_unit}s <= {params.target_fpr:g}): "
        f"out-of-fold FPR {f['cv_fpr']:.4f} of rows, {f['cv_fpr_texts']:.4f} of distinct texts, TPR {f['cv_tpr']:.4f}; "
        "highest per-style FPR " + ", ".join(f"{s} {v:.3f}" for s, v in worst),
        *([f"{f['rows_not_calibrating']} rows marked \"calibrate\": false (fitted on, not setting the threshold): "
           f"out-of-fold FPR {f['cv_fpr_not_calibrating']:.4f} at the threshold"] if "rows_not_calibrating" in f else []),
        *([f"length_adjust {f['length_adjust']:.4f} (the benign 90th percentile's slope against ln(windows)); benign "
           f"out-of-fold median by data tokens, raw: {_buckets(f['benign_median_by_length']['raw'])}; adjusted: "
           f"{_buckets(f['benign_median_by_length']['signal'])}",
           f"policy signal: length_adjust: {f['length_adjust']:.4f}"] if params.length_adjust else []),
        f"policy rule: when: <signal> > {f['threshold']:.4f}",
    ]


def _buckets(medians: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in medians.items())
