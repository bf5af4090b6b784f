"""The engine client that vLLM's serving classes call. ``generate`` is the
one place where a served request meets the guard: it is prepared with the
same code as ``GuardedLLM`` (``innerguard.engine.requests``), sent with the
guard's arguments, and its verdict is known before anything is yielded.

A generation call that did not come through a guarded route has no
request context and is refused: no path reaches the engine unguarded.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any, AsyncGenerator, Mapping

from vllm.sampling_params import RequestOutputKind

from innerguard.engine.contract import RPC_TAKE_DECODE
from innerguard.engine.output_watch import OutputRules, RequestWatch
from innerguard.engine.requests import GuardRequest, PreparedRequest, prepare
from innerguard.engine.verdicts import explain, refuse, undecided
from innerguard.engine.serve import context

INTERNAL = "innerguard-internal-"  # request ids of the server's own engine calls


class GuardError(ValueError):
    """A request the guard cannot serve; vLLM's serving classes turn a
    ValueError into a 400 with this message."""


class GuardedEngineClient:
    def __init__(self, engine, guard):
        self._engine = engine
        self._guard = guard
        self._output_rules: tuple[str, OutputRules] | None = None  # of the newest plan served

    def __getattr__(self, name: str) -> Any:  # everything else is vLLM's
        return getattr(self._engine, name)

    async def generate(self, prompt, sampling_params, request_id: str, **kwargs) -> AsyncGenerator[Any, None]:
        ctx = context.current.get()
        if ctx is None:
            if request_id.startswith(INTERNAL):
                async for out in self._engine.generate(prompt, sampling_params, request_id, **kwargs):
                    yield out
                return
            raise GuardError("this endpoint is not guarded by innerguard; use /v1/chat/completions or /v1/completions")
        index = ctx.calls
        ctx.calls += 1
        plan = self._guard.plan  # one revision for the whole request
        prepared = self._prepare(ctx, index, prompt, plan)
        if prepared.error is not None:
            raise GuardError(f"innerguard: {prepared.error}")
        client_salt = prompt.get("cache_salt") if isinstance(prompt, Mapping) else None
        if prepared.args is None:  # no policy applies: plain vLLM
            ctx.settle(index, {})
            await ctx.all_decided()
            salt = self._guard.cache_salt(ctx.tenant, client_salt, None)
            if salt != client_salt:
                prompt = {**prompt, "cache_salt": salt}
            async for out in self._engine.generate(prompt, sampling_params, request_id, **kwargs):
                yield out
            return
        params = sampling_params.clone()
        params.extra_args = {**(params.extra_args or {}), **prepared.extra_args}
        asked = params.output_kind
        final_only = asked == RequestOutputKind.FINAL_ONLY
        watch = self._watch(plan, prepared, params.n)
        if watch is not None and not getattr(params, "detokenize", True):  # an output rule would read nothing
            raise GuardError("innerguard: output rules read the generated text; this request turns detokenization off")
        if final_only or watch is not None:  # see the verdict after the first step; the output rules every step
            params.output_kind = RequestOutputKind.CUMULATIVE
        salt = self._guard.cache_salt(ctx.tenant, client_salt, prepared.cache_salt, prepared.shared_salt)
        engine_prompt = {"prompt_token_ids": list(prepared.prompt_token_ids), **({"cache_salt": salt} if salt else {})}
        if prepared.calibration is not None:
            await self._calibrate(prepared, request_id)
        stream = self._engine.generate(engine_prompt, params, request_id, **kwargs)
        result = None
        usage = _Usage(asked)  # counted as the client receives it
        try:
            first = await anext(stream, None)
            result = await self._guard.fetcher.take(prepared.key) if first is not None else None
            if result is None:
                result = undecided(prepared)
                self._guard.log.error("guard recorded no decision for a guarded request", request=request_id)
            await self._guard.decided(ctx, prepared, explain(prepared, result), plan)
            ctx.settle(index, result)
            if first is None:
                return
            await ctx.all_decided()  # nothing of any prompt before every verdict is in
            if result.get("blocked"):
                watch = None  # nothing was generated to decide on
                yield usage.add(refuse(first, result.get("message"), n=params.n, keep_logprobs=params.logprobs is not None))
                return
            if watch is not None:
                async for out in _released(first, stream, watch, asked, self._take_decode(prepared.key)):
                    yield usage.add(out)
                return
            if not final_only:
                yield usage.add(first)
                async for out in stream:
                    yield usage.add(out)
                return
            # What FINAL_ONLY would have given: one output, every completion in it.
            latest = {c.index: c for c in first.outputs}
            last = first
            async for last in stream:
                latest.update((c.index, c) for c in last.outputs)
            last.outputs = [latest[i] for i in sorted(latest)]
            yield usage.add(last)
        finally:
            await stream.aclose()
            if result is not None:
                self._guard.completed(result, usage.tokens, usage.finish_reason, watch.events() if watch else None)

    def _take_decode(self, key: str):
        """What the worker's decode rules found for the request ``key`` so far."""
        async def take() -> dict[str, Any]:
            return (await self._engine.collective_rpc(RPC_TAKE_DECODE, args=([key],)))[0].get(key, {})
        return take

    def _watch(self, plan, prepared: PreparedRequest, n: int) -> RequestWatch | None:
        if self._output_rules is None or self._output_rules[0] != plan.bundle_hash:
            self._output_rules = (plan.bundle_hash, OutputRules(plan))
        rules = self._output_rules[1]
        return RequestWatch(rules, prepared.policies, n, prepared.repeat_sources) if rules.applies(prepared.policies) else None

    def _prepare(self, ctx, index: int, prompt, plan) -> PreparedRequest:
        request = _guard_request(ctx, index, prompt)
        theirs = _token_ids(prompt)
        prepared = prepare(plan, request, self._guard.tokenizer, share_prefix_cache=self._guard.share_prefix_cache,
                           share_token_scores=self._guard.share_token_scores, token_ids=theirs)
        if prepared.error is None and prepared.args is not None and ctx.route == "chat":
            # vLLM rendered the conversation; the spans are ours. They must
            # describe the very tokens the model reads.
            if theirs is not None and theirs != list(prepared.prompt_token_ids):
                return PreparedRequest(
                    request=request,
                    error="the chat template renders this conversation differently from innerguard's span "
                    "rendering (tools, custom templates or template kwargs are not supported on guarded requests)",
                )
        return prepared

    async def _calibrate(self, prepared: PreparedRequest, request_id: str) -> None:
        from vllm import SamplingParams

        calibration = prepared.calibration
        params = SamplingParams(max_tokens=1, extra_args=calibration.extra_args)
        prompt = {"prompt_token_ids": list(calibration.prompt_token_ids), "cache_salt": prepared.cache_salt}
        async for _ in self._engine.generate(prompt, params, f"{INTERNAL}calibration-{request_id}"):
            pass


async def _released(first, stream, watch: RequestWatch, asked, take_decode) -> AsyncGenerator[Any, None]:
    """What the client may see of a request with output rules: vLLM's
    cumulative outputs, read by the rules after every step, returned in the
    kind the client asked for. A stream sends only what the rules have read,
    less each completion's newest ``hold_back`` tokens (the strictest
    ``output.hold_back`` of the request's policies); a stopped
    completion ends at its cut with ``content_filter``; once every completion
    has ended the request ends (closing ``stream`` aborts it in the engine)."""
    sent: dict[int, tuple[int, int]] = {}  # completion index -> tokens, characters returned
    ended: set[int] = set()  # completions whose finish has been returned
    out = first
    while out is not None:
        if watch.ending(out):  # the worker's decode rules may cut what this output holds
            watch.take_decode(out, await take_decode())
        every_one_ended = watch.update(out)
        last = out.finished or every_one_ended
        if asked == RequestOutputKind.FINAL_ONLY:
            if last:
                final = copy.copy(out)
                final.outputs = [
                    dataclasses.replace(c, text=c.text + _stop_suffix(stop, len(c.text)))
                    if (stop := watch.watches[c.index].stop) is not None else c
                    for c in watch.outputs()
                ]
                final.finished = True
                yield final
                return
        else:
            completions = []
            for completion, tokens, chars in watch.released():
                index = completion.index
                done = completion.finish_reason is not None and tokens == len(completion.token_ids)
                was_tokens, was_chars = sent.get(index, (0, 0))
                if index in ended or (tokens == was_tokens and not done):
                    continue
                start_tokens, start_chars = (was_tokens, was_chars) if asked == RequestOutputKind.DELTA else (0, 0)
                logprobs = completion.logprobs
                stop = watch.watches[index].stop
                # The wire has no other place for the policy's message: it ends a stopped choice's text.
                message = _stop_suffix(stop, chars) if done and stop is not None else ""
                completions.append(dataclasses.replace(
                    completion,
                    text=completion.text[start_chars:chars] + message,
                    token_ids=list(completion.token_ids[start_tokens:tokens]),
                    logprobs=logprobs[start_tokens:tokens] if logprobs is not None else None,
                    finish_reason=completion.finish_reason if done else None,
                    stop_reason=completion.stop_reason if done else None,
                ))
                sent[index] = (tokens, chars)
                if done:
                    ended.add(index)
            if completions:
                step = copy.copy(out)
                step.outputs, step.finished = completions, last
                yield step
            if last:
                return
        out = await anext(stream, None)


def _stop_suffix(stop, returned_chars: int) -> str:
    """The stop rule's message, after a blank line when some text came first."""
    if not stop.message:
        return ""
    return ("\n\n" if returned_chars else "") + stop.message


class _Usage:
    """Output tokens and finish reason of what was returned, for the audit
    trail's completion record."""

    def __init__(self, kind):
        self._delta = kind == RequestOutputKind.DELTA
        self._tokens: dict[int, int] = {}
        self._finish: dict[int, str | None] = {}

    def add(self, out):
        for c in out.outputs:
            self._tokens[c.index] = self._tokens.get(c.index, 0) * self._delta + len(c.token_ids)
            self._finish[c.index] = c.finish_reason or self._finish.get(c.index)
        return out

    @property
    def tokens(self) -> int:
        return sum(self._tokens.values())

    @property
    def finish_reason(self) -> str | None:
        reasons = sorted({r for r in self._finish.values() if r})
        return ",".join(reasons) or None


def _token_ids(prompt) -> list[int] | None:
    if isinstance(prompt, Mapping):
        ids = prompt.get("prompt_token_ids")
        return list(ids) if ids is not None else None
    return None


def _guard_request(ctx, index: int, prompt) -> GuardRequest:
    body = ctx.body
    common = dict(
        id=f"{index}",
        extra_policies=ctx.client.policies,
        tags=ctx.tags,
        tenant=ctx.tenant,
        route=ctx.route,
    )
    if ctx.route == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise GuardError("'messages' must be a list")
        return GuardRequest(messages=tuple(_plain_message(m) for m in messages), **common)
    prompts = context.completion_prompts(body)
    if index >= len(prompts):
        raise GuardError("more engine calls than prompts in the request")
    text = prompts[index]
    if not isinstance(text, str):
        # Token ids carry no markers, so no span could be trusted or not.
        raise GuardError("guarded completions take text prompts (token-id prompts carry no spans)")
    return GuardRequest(prompt=text, **common)


def _plain_message(message: Any) -> Mapping[str, Any]:
    if not isinstance(message, Mapping):
        raise GuardError("each message must be an object")
    return {"role": message.get("role"), "content": message.get("content")}
