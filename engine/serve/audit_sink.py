"""The server's audit records: one per evaluated policy, written when the
verdict is known and before anything of the response is returned (with
``--audit-durability sync``, on disk by then)."""
from __future__ import annotations

import asyncio
import json
from typing import Any

from innerguard.engine.audit import AuditLog, RequestInfo, load_key


class ServerAudit:
    def __init__(self, log: AuditLog, durability: str, model_name: str):
        self.log = log
        self.durability = durability
        self.model_name = model_name

    async def record(self, ctx, prepared, result: dict[str, Any], plan) -> None:
        body = ctx.body
        prompt = body.get("messages") if ctx.route == "chat" else body.get("prompt")
        info = RequestInfo(
            request_id=result["decision_id"],  # the id the response's innerguard object carries
            correlation_id=ctx.client.correlation_id,
            traceparent=ctx.traceparent,
            tenant=ctx.tenant,
            api_key_name=ctx.tenant,
            received_at=ctx.received_at,
            model=self.model_name,
            prompt=prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False),
            prompt_tokens=len(prepared.prompt_token_ids),
            labels={"route": ctx.route, "tags": list(ctx.tags)},
        )
        ack = self.log.record_decision(result, plan=plan, request=info)
        if self.durability == "sync":
            await asyncio.to_thread(ack.wait)

    def completed(self, result: dict[str, Any], output_tokens: int, finish_reason: str | None,
                  output_decisions: list[dict[str, Any]] | None = None) -> None:
        self.log.record_completion(result["decision_id"], output_tokens=output_tokens, finish_reason=finish_reason,
                                   output_decisions=output_decisions)

    def status(self) -> dict[str, Any]:
        return {"head": self.log.head, "stream": str(self.log.path), "backlog": self.log.backlog,
                "durability": self.durability}

    def close(self) -> None:
        self.log.close()


def open_audit(path: str, *, key_file: str | None, durability: str, model_name: str) -> ServerAudit:
    log = AuditLog(path, key=load_key(key_file), durability=durability)
    return ServerAudit(log, durability, model_name)
