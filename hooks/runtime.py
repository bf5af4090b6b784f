"""One installed plan inside the worker: its hooks, and what a request needs
under it.

One forward, per step:
  inputs prepared    -> the lifecycle reads the step (rows per request) and
                        sets the rows each add-steer moves (steering_buffers.py)
  attention points   -> capture.py: post-RoPE Q (last prompt token) and K (prompt rows)
  layer points       -> probe_buffers.py: generated-token probe scores;
                        capture.py: the residual stream at the last prompt token;
                        the add-steers from the device buffers; steer.py: project-steers
The points are guard_points.py's, placed when the model loaded, so they run
in compiled graphs too; the step boundary and the logits hook sit outside
the compiled part of the model.
  logits hook       -> decide_step.py: analyzers, rules, verdict; a blocked
                       request's row is forced to end-of-sequence and the
                       scheduler finishes it in this step.
Every hook catches what one request's data can raise and records it on that
request: nothing a request sends can raise out of vLLM's forward.
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Callable

import torch

from innerguard.engine.plan import Plan, SteerSpec
from innerguard.hooks.capture import qk_hook, residual_hook, token_probe_hook
from innerguard.engine.contract import WorkerResult
from innerguard.hooks.decide_step import decide_hook, fail_closed
from innerguard.hooks.calibration import geometry_of
from innerguard.hooks.decode_focus import generated_focus_hook
from innerguard.hooks.decode_probes import DecodeRules
from innerguard.hooks.modules import ModelModules
from innerguard.hooks import probe_buffers, steering_buffers
from innerguard.hooks.steer import steer_hook

ALWAYS = {"op": "const", "value": True}  # a rule's condition when it has no `when`
MAX_LOGGED_FAILURES = 10  # per hook: a broken hook must not flood the log

log = logging.getLogger("innerguard")


class GuardRuntime:
    def __init__(
        self,
        plan: Plan,
        modules: ModelModules,
        vectors: dict[str, torch.Tensor],
        start_signals: Callable[..., tuple[dict[str, Any], dict[str, str]]],
        decide: Callable[..., WorkerResult],
    ):
        self.plan = plan
        self.bundle = plan.bundle_hash
        self.modules = modules
        self.vectors = vectors
        self.start_signals = start_signals  # signals.start_signals: values may stay on the device
        self.decide = decide
        self.hook_calls: Counter[str] = Counter()
        self.live = 0  # requests running under this plan
        self.rows: list = []  # this step's rows of the requests with captures or a verdict due
        # (state, batch index, token row, generated token): steady requests
        # whose one generated token the probe buffers score
        self.decoders: list = []
        self.ended_decodes: list = []  # DecodeProbes of completions that ended, their rows given back after a landing
        self.steer_rows: dict[int, list] = {}
        self.decided_this_step = False
        self._step_indices: dict[tuple, torch.Tensor] = {}
        self.policies = {p.name: p for p in plan.policies}
        self.analyzers = {a.signal: a for a in plan.analyzers}
        self.steers_by_id: dict[str, list[SteerSpec]] = {}
        for steer in plan.steers:  # one rule may steer several layers
            self.steers_by_id.setdefault(steer.id, []).append(steer)
        self._qk_layers = sorted({c.layer for c in plan.qk_captures})
        self._residual_layers = sorted({c.layer for c in plan.residual_captures})
        self._steer_layers = sorted({s.layer for s in plan.steers})
        token_probes = [a for a in plan.analyzers if a.kind == "token_probe"]
        self._token_layers = sorted({int(layer) for a in token_probes if a.params.get("span") != "generated"
                                     for layer in a.params["layers"]})
        self._focus_layers = sorted({int(layer) for a in plan.analyzers if a.kind == "attention_tracker" and a.on_generated_tokens
                                     for layer, _ in a.params["heads"]})
        self.decode_rules = DecodeRules(self.analyzers)
        self.focus_step = None  # this step's generated-token attention trackers (decode_focus.FocusStep)
        self.scores_in_flight = None  # the last step's generated-token scores (decode_probes.StepScores)
        self.focus_keys: dict = {}  # their padded span keys by (signal, layer), while the same requests decode
        self.token_weights = {(a.signal, int(layer)): vectors[name] for a in token_probes
                              for layer, name in a.params["weights"].items()}
        self.steer_slots: dict[SteerSpec, int] = {}  # add-steers: their row in the layer's steering table
        # generated-token probes: their column of the probe buffers' scores
        self._generated_probes = [a.signal for a in token_probes if a.params.get("span") == "generated"]
        self.probe_slots: dict[str, int] = {}
        self._handles: list[Any] = []
        self._failures: Counter[str] = Counter()
        self.lifecycle = None

    # -- installation --------------------------------------------------------
    def install(self, lifecycle) -> "GuardRuntime":
        """Register every hook, or none: a failure removes those already added."""
        self.lifecycle = lifecycle
        m = self.modules
        try:
            for layer in self._qk_layers:
                self._handles.append(m.on_attention_input(layer, qk_hook(self, layer)))
            for layer in self._residual_layers:  # before steering: probes read the unsteered stream
                self._handles.append(m.on_layer_output(layer, residual_hook(self, layer)))
            for layer in self._token_layers:
                self._handles.append(m.on_layer_output(layer, token_probe_hook(self, layer)))
            if self._focus_layers and not m.shard.whole:
                # Each rank holds some of the heads; the shares would have to
                # be added up across ranks after every token.
                raise RuntimeError("attention_tracker signals with span: generated do not run under tensor parallelism yet")
            for layer in self._focus_layers:  # after the captures of that point: a forced completion reads them
                self._handles.append(m.on_attention_input(layer, generated_focus_hook(self, layer, geometry_of(self.plan))))
            for layer in self._steer_layers:
                self._handles.append(m.on_layer_output(layer, steer_hook(self, layer)))
            self._allocate_steers()
            self._allocate_probes()
            self._handles.append(m.logits.register_forward_hook(decide_hook(self, lifecycle)))
        except Exception:
            self.uninstall()
            raise
        return self

    def _allocate_steers(self) -> None:
        buffers = steering_buffers.BUFFERS
        for spec in self.plan.steers:
            if spec.method != "add" or spec in self.steer_slots:
                continue
            if buffers is None:
                raise RuntimeError("the model has no steering buffers (start the engine with load_format='innerguard')")
            self.steer_slots[spec] = buffers.allocate(spec.layer, spec.coefficient * self.vectors[spec.vector])

    def _allocate_probes(self) -> None:
        buffers = probe_buffers.BUFFERS
        for signal in self._generated_probes:
            if signal in self.probe_slots:
                continue
            if buffers is None:
                raise RuntimeError("the model has no probe buffers (start the engine with load_format='innerguard')")
            layers = {layer: w for (s, layer), w in self.token_weights.items() if s == signal}
            self.probe_slots[signal] = buffers.allocate(layers)

    def uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        buffers = steering_buffers.BUFFERS
        for spec, slot in self.steer_slots.items():
            if buffers is not None:
                buffers.release(spec.layer, slot)
        self.steer_slots.clear()
        for slot in self.probe_slots.values():
            if probe_buffers.BUFFERS is not None:
                probe_buffers.BUFFERS.release(slot)
        self.probe_slots.clear()
        self.focus_keys.clear()

    @property
    def installed(self) -> bool:
        return bool(self._handles)

    @property
    def num_hooks(self) -> int:
        return len(self._handles)

    @property
    def hook_points(self) -> list[str]:
        return (
            ["step", "logits"]
            + [f"qk.{layer}" for layer in self._qk_layers]
            + [f"residual.{layer}" for layer in self._residual_layers]
            + [f"tokens.{layer}" for layer in self._token_layers]
            + [f"focus.{layer}" for layer in self._focus_layers]
            + [f"steer.{layer}" for layer in self._steer_layers]
        )

    def contained(self, label: str, hook):
        """``hook``, never raising into vLLM: a failure fails this step's
        requests (their error modes decide), and the logits hook's blocks them."""

        def run(*args):
            try:
                return hook(*args)
            except Exception as exc:
                self._failures[label] += 1
                if self._failures[label] <= MAX_LOGGED_FAILURES:
                    log.exception("innerguard: hook %s failed", label)
                for rows in self.rows:
                    rows.state.fail(f"hook {label} failed: {type(exc).__name__}: {exc}")
                    if label == "logits" and rows.last_row is not None:
                        fail_closed(self.lifecycle, rows.state, exc)
                return None

        return run

    # -- per step, per request -----------------------------------------------
    def begin_step(self) -> None:
        self.rows = []
        self.decoders = []
        self.focus_step = None
        self.steer_rows = {}
        self.decided_this_step = False
        self._step_indices = {}

    def step_index(self, ranges: tuple[tuple[int, int], ...], device) -> torch.Tensor:
        """The token rows of ``ranges`` as one index tensor on ``device``,
        made once per step: the layers that capture the same rows share it."""
        index = self._step_indices.get((ranges, device))
        if index is None:
            rows = torch.cat([torch.arange(a, b) for a, b in ranges]) if ranges else torch.empty(0, dtype=torch.long)
            index = self._step_indices[(ranges, device)] = rows.to(device, non_blocking=True)
        return index

    def prepare(self, state) -> None:
        """What ``state`` needs under this plan: its policies, the layers to
        capture, the reranker's query, the steers that apply from the start."""
        names = state.args["policies"]
        state.policies = tuple(self.policies[n] for n in names if n in self.policies)
        state.unknown_policies = [n for n in names if n not in self.policies]
        qk, residual, tokens, token_probes = set(), set(), set(), []
        for signal in sorted({s for p in state.policies for s in p.signals}):
            spec = self.analyzers.get(signal)
            if spec is not None:
                qk.update(spec.params.get("qk_layers", ()))
                residual.update(spec.params.get("residual_layers", ()))
                if spec.kind == "token_probe":
                    tokens.update(int(layer) for layer in spec.params["layers"])
                    token_probes.append(signal)
        state.qk_layers, state.residual_layers = frozenset(qk), frozenset(residual)
        state.token_layers, state.token_probes = frozenset(tokens), tuple(token_probes)
        if state.unknown_policies:
            # The engine checked these names against its plan; this plan
            # differs (a reload raced the request). Never guard with less.
            state.fail(f"policies {state.unknown_policies} are not installed in the worker", never_open=True)
        rerank = state.args.get("rerank") or {}
        if rerank:
            start, end = next(iter(rerank.values()))["query"][0]
            state.query_span = (start, end)
            state.captures.query_start = start
        if state.is_calibration:
            return
        state.decode = self.decode_rules.start(state.policies)
        if state.decode is not None:  # its attention trackers read the prompt's span keys
            state.qk_layers |= state.decode.focus_layers
        # Unconditional steers apply from the first prompt token on; conditional
        # ones once the prompt has been read and decided (decide_step.py).
        for policy in state.policies:
            for rule in policy.rules:
                if rule.action == "steer" and rule.condition == ALWAYS and policy.mode == "enforce":
                    state.add_steers(self.steers_by_id.get(rule.params.get("steer"), ()))
                    state.static_steers.add(rule.params.get("steer"))
