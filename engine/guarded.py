"""``GuardedLLM``: ``vllm.LLM`` with innerguard's policies running inside it.

    llm = GuardedLLM("smollm2-135m-instruct", policies="policies/")
    outs = llm.chat([[{"role": "system", "content": "Summarise."},
                      {"role": "user", "content": untrusted_text}]])
    outs[0].text, outs[0].blocked, outs[0].decisions

Each request is detected during its prefill and decided before its first
token is sampled, in the same forward pass; the worker returns only small
results (signals, decisions). The engine runs in vLLM's default mode (the
guard points are compiled in; ``enforce_eager=True`` is an option), and a
canary request with a known decision proves at every install that capture,
row attribution and arguments work in that mode.
"""
from __future__ import annotations

import copy
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from innerguard.engine.contract import RPC_TAKE_DECODE, RPC_TAKE_RESULTS, RPC_UNINSTALL
from innerguard.engine import models
from innerguard.engine.audit import AuditLog, RequestInfo, load_key
from innerguard.engine.compiler import compile_policies
from innerguard.engine.errors import InnerguardError
from innerguard.engine.logging import get_logger
from innerguard.engine.output_watch import OutputRules, RequestWatch
from innerguard.engine.plan import Plan
from innerguard.engine.requests import GuardRequest, PreparedRequest, RequestError, invisible, prepare_many
from innerguard.engine.verdicts import FINISH_BLOCKED, explain, refuse, undecided
from innerguard.engine.vllm_engine import guarded_engine_kwargs, install_plan, start_llm

log = get_logger(__name__)

FINISH_ERROR = "error"
PREPARE_CHUNK = 32  # requests prepared at a time, while the engine runs those before


@dataclass
class GuardedOutput:
    id: str
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str | None
    action: str = "allow"  # the verdict: allow, flag, steer, block, ...
    blocked: bool = False
    decisions: list[dict[str, Any]] = field(default_factory=list)
    signals: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    latency_ms: float | None = None  # from prefill start to decision, in the worker
    prefill_tokens: int | None = None
    documents: dict[str, Any] = field(default_factory=dict)  # per reranker signal: scores, order
    output_decisions: list[dict[str, Any]] = field(default_factory=list)  # output rules that stopped or flagged
    # Per completion, the worker's score of each generated token (all but the
    # last), per decode signal: what the decode rules read.
    decode_scores: dict[int, dict[str, list[float]]] = field(default_factory=dict)
    decode_values: dict[int, dict[str, float]] = field(default_factory=dict)  # each decode signal's value at the end
    output: Any = None  # vLLM's RequestOutput, when the request ran

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids)

    def to_row(self) -> dict[str, Any]:
        """The batch-file contract of ``innerguard run``."""
        return {
            "id": self.id,
            "text": self.text,
            "finish_reason": self.finish_reason,
            "num_output_tokens": self.num_output_tokens,
            "decisions": [
                {k: d.get(k) for k in ("policy", "version", "action", "mode", "rule", "signals", "error")}
                for d in self.decisions
            ],
            **({"output_decisions": self.output_decisions} if self.output_decisions else {}),
            **({"error": self.error} if self.error else {}),
        }


class GuardedLLM:
    def __init__(
        self,
        model: str | os.PathLike,
        policies: str | os.PathLike | Sequence[str | os.PathLike] | Plan,
        *,
        audit_log: str | os.PathLike | None = None,
        audit_key_file: str | os.PathLike | None = None,
        audit_durability: str = "batch",
        cache_dir: str | os.PathLike | None = None,
        invisible_characters: str = "strip",
        **engine_overrides: Any,
    ):
        if invisible_characters not in invisible.MODES:
            raise InnerguardError(f"invisible_characters must be one of {', '.join(invisible.MODES)}, "
                                  f"not {invisible_characters!r}")
        self.invisible_characters = invisible_characters  # what happens to text a reader cannot see (requests/invisible.py)
        self.model_dir = models.resolve(model, cache_dir)
        plan = policies if isinstance(policies, Plan) else self.compile(policies)
        kwargs = guarded_engine_kwargs(str(self.model_dir), overrides=engine_overrides)
        self.llm = start_llm(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.audit = AuditLog(audit_log, key=load_key(audit_key_file), durability=audit_durability) if audit_log else None
        self.model_name = str(model)
        self._verdicts: dict[str, dict[str, Any]] = {}  # taken from the worker, not yet returned
        self._output_decisions: dict[int, list[dict[str, Any]]] = {}  # by id(prepared), not yet returned
        self._decode_scores: dict[int, tuple[dict, dict]] = {}  # likewise: (scores, values)
        self.plan: Plan | None = None
        self.install_info: dict[str, Any] = {}  # the workers' answer to the last install (runner, hook points, KV read-back)
        self.install(plan)

    # -- plans ----------------------------------------------------------------
    def compile(self, policies) -> Plan:
        paths = [policies] if isinstance(policies, (str, os.PathLike)) else list(policies)
        plan, _ = compile_policies(paths, self.model_dir)
        return plan

    def install(self, plan: Plan) -> None:
        """Install ``plan`` in every worker and prove its hooks fire."""
        info = install_plan(self.llm, plan)
        self.plan, self.install_info = plan, info
        self.output_rules = OutputRules(plan)
        self.share_prefix_cache = bool(info.get("reads_kv_cache"))
        self.share_token_scores = bool(info.get("reads_token_scores"))
        log.info("plan installed", bundle_hash=plan.bundle_hash, runner=info["runner"], hooks=len(info["hook_points"]),
                 graphs=info.get("graphs"))

    def reload(self, policies) -> Plan:
        """Swap in new policies without restarting. A policy set that does not
        compile raises and leaves the running plan in place."""
        plan = policies if isinstance(policies, Plan) else self.compile(policies)
        self.install(plan)
        return plan

    # -- requests -------------------------------------------------------------
    def chat(self, conversations, sampling_params=None, *, policies: Sequence[str] | None = None, use_tqdm: bool = False) -> list[GuardedOutput]:
        """OpenAI-style conversations (one list of messages, or a list of them)."""
        if conversations and isinstance(conversations[0], Mapping):
            conversations = [conversations]
        requests = [
            GuardRequest(id=str(i), messages=tuple(c), policies=None if policies is None else tuple(policies))
            for i, c in enumerate(conversations)
        ]
        return self.run(requests, sampling_params, use_tqdm=use_tqdm)

    def generate(self, prompts: Sequence[str], sampling_params=None, *, policies: Sequence[str] | None = None, use_tqdm: bool = False) -> list[GuardedOutput]:
        """Raw prompts; untrusted text goes between ``<untrusted>`` markers."""
        requests = [
            GuardRequest(id=str(i), prompt=p, policies=None if policies is None else tuple(policies))
            for i, p in enumerate(prompts)
        ]
        return self.run(requests, sampling_params, use_tqdm=use_tqdm)

    def run(self, requests: Sequence[GuardRequest | Mapping[str, Any]], sampling_params=None, *, use_tqdm: bool = False) -> list[GuardedOutput]:
        """Run a batch; results come back in input order. A request with bad
        arguments gets an ``error`` output and the rest of the batch proceeds."""
        from vllm import SamplingParams

        base = sampling_params or SamplingParams(temperature=0.0, max_tokens=64)
        if self.output_rules and not getattr(base, "detokenize", True):
            raise InnerguardError("output rules read the generated text, and detokenize=False would hide it from them",
                                  hint="keep SamplingParams(detokenize=True) (the default) under this plan")
        parsed: list[GuardRequest | PreparedRequest] = []  # a row that is no request is already its output
        for i, request in enumerate(requests):
            if not isinstance(request, GuardRequest):
                try:
                    request = GuardRequest.from_row(request, default_id=str(i))
                except RequestError as exc:
                    bad_id = str(request.get("id", i)) if isinstance(request, Mapping) else str(i)
                    request = PreparedRequest(request=GuardRequest(id=bad_id, prompt=""), error=str(exc))
            if isinstance(request, GuardRequest):
                try:
                    request = invisible.apply_to_request(request, self.invisible_characters)
                except RequestError as exc:
                    request = PreparedRequest(request=request, error=str(exc))
            parsed.append(request)
        prepared: list[PreparedRequest] = []
        outputs = self._generate(self._prepared_chunks(parsed, prepared), base, len(parsed), use_tqdm)
        return [self._output(p, outputs.get(id(p))) for p in prepared]

    def _prepared_chunks(self, parsed, prepared: list[PreparedRequest]):
        """``parsed`` prepared a chunk at a time, each chunk appended to
        ``prepared`` and yielded as its runnable requests: the engine (its own
        process) runs one chunk while the next is prepared."""
        for i in range(0, len(parsed), PREPARE_CHUNK):
            chunk = parsed[i:i + PREPARE_CHUNK]
            ready = iter(prepare_many(self.plan, [r for r in chunk if isinstance(r, GuardRequest)], self.tokenizer,
                                      share_prefix_cache=self.share_prefix_cache,
                                      share_token_scores=self.share_token_scores))
            done = [next(ready) if isinstance(r, GuardRequest) else r for r in chunk]
            prepared += done
            yield [p for p in done if p.error is None]

    def _generate(self, chunks, base, total: int, use_tqdm: bool) -> dict[int, Any]:
        """Adds each chunk's requests as it comes, then steps the engine
        itself, so that each verdict is taken (and audited) right after the
        step that decided it, not after the whole batch."""
        from tqdm import tqdm

        engine = self.llm.llm_engine
        batch = uuid.uuid4().hex[:8]
        started = time.time()
        by_id: dict[str, PreparedRequest] = {}
        after: dict[str, PreparedRequest] = {}  # by calibration pass: the request that starts when it ends
        waiting: dict[str, PreparedRequest] = {}
        watched: dict[str, RequestWatch] = {}  # requests with output rules, read after every step

        def add(p: PreparedRequest) -> None:
            request_id = f"innerguard-{batch}-{len(by_id)}"
            params = self._params(base, p)
            if p.args is not None and self.output_rules.applies(p.policies):
                from vllm.sampling_params import RequestOutputKind

                params.output_kind = RequestOutputKind.CUMULATIVE
                watched[request_id] = RequestWatch(self.output_rules, p.policies, params.n, p.repeat_sources)
                if p.request.completion is not None:  # teacher forced: the text rules read the answer first
                    forced = p.prompt_token_ids[p.args["generated_from"]:]
                    watched[request_id].read_forced([self.tokenizer.decode(forced[:i]) for i in range(1, len(forced) + 1)])
            engine.add_request(request_id, _engine_prompt(p.prompt_token_ids, p.cache_salt), params)
            by_id[request_id] = p
            if p.key:
                waiting[p.key] = p

        bar = tqdm(total=total, desc="guarded requests", disable=not use_tqdm)
        try:
            for runnable in chunks:
                for p in runnable:
                    if p.calibration is None:
                        add(p)
                    else:  # the reranker's content-free pass first: it computes the documents, the request reuses them
                        calibration_id = f"innerguard-{batch}-calibration-{len(after)}"
                        engine.add_request(calibration_id, _engine_prompt(p.calibration.prompt_token_ids, p.cache_salt),
                                           self._calibration_params(p))
                        after[calibration_id] = p
        except BaseException:  # e.g. interrupted while preparing: the chunks already running stop too
            if by_id or after:
                engine.abort_request([*by_id, *after])
            raise
        bar.update(total - len(by_id) - len(after))  # those that never run: errors
        outputs: dict[int, Any] = {}
        while engine.has_unfinished_requests():
            step = engine.step()
            # The worker's decode rules may cut what these outputs hold: their
            # records, taken in one call for the step (one call per
            # completion held the engine between steps hundreds of times).
            ending = {out.request_id: by_id[out.request_id].key for out in step
                      if out.request_id in watched and watched[out.request_id].ending(out)}
            records = self.llm.collective_rpc(RPC_TAKE_DECODE, args=(list(ending.values()),))[0] if ending else {}
            for out in step:
                watch = watched.get(out.request_id)
                if watch is not None:
                    if out.request_id in ending:
                        watch.take_decode(out, records.get(ending[out.request_id], {}))
                    every_one_ended = watch.update(out)
                    if not (out.finished or every_one_ended):
                        continue
                    if not out.finished:  # every completion stopped: nothing more is generated
                        engine.abort_request([out.request_id])
                        out.finished = True
                    del watched[out.request_id]
                    out.outputs = watch.outputs()
                    self._output_decisions[id(by_id[out.request_id])] = watch.events()
                    if watch.decodes:
                        self._decode_scores[id(by_id[out.request_id])] = (watch.scores(), watch.values())
                elif not out.finished:
                    continue
                if out.request_id in after:
                    add(after.pop(out.request_id))
                elif out.request_id in by_id:
                    outputs[id(by_id[out.request_id])] = out
                    bar.update(1)
            if waiting:
                self._take_verdicts(waiting, started)
        bar.close()
        if waiting:
            self._take_verdicts(waiting, started)
        for p in waiting.values():  # the worker never decided: the guard did not run
            log.error("guard recorded no decision for a guarded request", request=p.request.id)
            self._verdicts[p.key] = undecided(p)
        return outputs

    def _take_verdicts(self, waiting: dict[str, PreparedRequest], started: float) -> None:
        found = self.llm.collective_rpc(RPC_TAKE_RESULTS, args=(list(waiting),))[0]
        for key, result in found.items():
            prepared = waiting.pop(key)
            self._verdicts[key] = result
            if self.audit is not None:
                self.audit.record_decision(result, plan=self.plan, request=RequestInfo(
                    request_id=prepared.request.id, received_at=started, model=self.model_name,
                    prompt=_prompt_text(prepared.request), prompt_tokens=len(prepared.prompt_token_ids)))

    @staticmethod
    def _calibration_params(prepared: PreparedRequest):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        return SamplingParams(max_tokens=1, extra_args=prepared.calibration.extra_args,
                              output_kind=RequestOutputKind.FINAL_ONLY)

    @staticmethod
    def _params(base, prepared: PreparedRequest):
        from vllm.sampling_params import RequestOutputKind

        # Shallow: only scalars and a new extra_args are set here, and vLLM
        # deep-copies every request's params itself when it takes them.
        params = copy.copy(base)
        # Only finished outputs are read (verdicts come from the worker), as
        # in ``LLM.generate``: no per-step output objects for every request.
        params.output_kind = RequestOutputKind.FINAL_ONLY
        if prepared.request.max_tokens is not None:
            params.max_tokens = prepared.request.max_tokens
        if prepared.args is not None:
            params.extra_args = {**(params.extra_args or {}), **prepared.extra_args}
        return params

    def _output(self, prepared: PreparedRequest, out) -> GuardedOutput:
        request = prepared.request
        if prepared.error is not None:
            return GuardedOutput(id=request.id, text="", token_ids=(), finish_reason=FINISH_ERROR, action="error", error=prepared.error)
        completion = out.outputs[0]
        result = {}
        if prepared.args is not None:
            result = explain(prepared, self._verdicts.pop(prepared.key, None) or undecided(prepared))
        blocked = bool(result.get("blocked"))
        output_decisions = self._output_decisions.pop(id(prepared), [])
        decode_scores, decode_values = self._decode_scores.pop(id(prepared), ({}, {}))
        if blocked:
            refuse(out, result.get("message"), keep_logprobs=False)
            output_decisions = []  # nothing was generated to decide on
        if self.audit is not None and prepared.args is not None:
            finished = out.outputs[0]
            self.audit.record_completion(request.id, output=finished.text, output_tokens=len(finished.token_ids),
                                         finish_reason=finished.finish_reason, output_decisions=output_decisions)
        stopped = any(d["action"] == "stop" and d["applied"] and d["completion"] == completion.index
                      for d in output_decisions)
        return GuardedOutput(
            id=request.id,
            text=(result.get("message") or "") if blocked else completion.text,
            token_ids=() if blocked else tuple(completion.token_ids),
            finish_reason=FINISH_BLOCKED if blocked else completion.finish_reason,
            action="stop" if stopped else result.get("action", "allow") if result else "allow",
            blocked=blocked,
            decisions=list(result.get("decisions", ())),
            signals=dict(result.get("signals", {})),
            error="; ".join(f"{k}: {v}" for k, v in (result.get("errors") or {}).items()) or None,
            latency_ms=result.get("decision_latency_ms"),
            prefill_tokens=result.get("prefill_tokens"),
            documents=dict(result.get("details") or {}),
            output_decisions=output_decisions,
            decode_scores=decode_scores,
            decode_values=decode_values,
            output=out,
        )

    def shutdown(self) -> None:
        if self.audit is not None:
            self.audit.close()
        engine = getattr(self.llm, "llm_engine", None)
        shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
        if shutdown:
            try:
                # A worker in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0)
                # outlives the engine: its guard points are process-wide and
                # would keep the model alive and fire for the next engine.
                self.llm.collective_rpc(RPC_UNINSTALL)
            except Exception as exc:  # a dead engine has nothing left to unhook
                log.debug("uninstall before shutdown failed", error=str(exc))
            shutdown()
        self.llm = None  # the model and its KV cache go with the last reference


def _engine_prompt(token_ids, cache_salt: str | None) -> dict[str, Any]:
    """A prompt as vLLM's engine takes it; a request with no salt shares the prefix cache."""
    return {"prompt_token_ids": list(token_ids), **({"cache_salt": cache_salt} if cache_salt else {})}


def _prompt_text(request: GuardRequest) -> str:
    """What the audit trail hashes for a request's prompt."""
    if request.messages is not None:
        return json.dumps([dict(m) for m in request.messages], ensure_ascii=False)
    return request.prompt or ""
