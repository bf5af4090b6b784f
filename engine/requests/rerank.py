"""The in-model reranker's inputs: document and query spans by role, and
the content-free calibration pass that shares the documents' prefix."""
from __future__ import annotations

from typing import Any, Sequence

from innerguard.engine.plan import Plan, PolicyProgram, encode_request_args
from innerguard.engine.requests.model import Calibration, RequestError
from innerguard.engine.requests.spans import Rendering

CONTENT_FREE_QUERY = "N/A"


def rerank_spans(plan: Plan, policies: Sequence[PolicyProgram], rendering: Rendering) -> dict[str, Any]:
    """Per reranker signal: document spans and the query span, from roles."""
    wanted = {s for p in policies for s in p.signals}
    messages = rendering.base.messages
    out: dict[str, Any] = {}
    for spec in plan.analyzers:
        if spec.kind != "reranker" or spec.signal not in wanted:
            continue
        doc_roles = tuple((spec.params.get("documents") or {}).get("roles") or ())
        query_roles = tuple((spec.params.get("query") or {}).get("roles") or ("user",))
        if not doc_roles:
            raise RequestError(f"signal {spec.signal}: documents must be selected by role for in-model reranking")
        documents = [[m.start, m.end] for m in messages if m.role in doc_roles and m.end > m.start]
        queries = [m for m in messages if m.role in query_roles and m.end > m.start]
        if not documents or not queries:
            raise RequestError(
                f"signal {spec.signal} needs messages with roles {list(doc_roles)} (documents) "
                f"and {list(query_roles)} (query)"
            )
        query = queries[-1]
        if documents[-1][1] > query.start:
            raise RequestError(
                f"signal {spec.signal}: the query ({query.role} message) must come after the documents",
                hint="put the retrieved documents before the question",
            )
        out[spec.signal] = {"documents": documents, "query": [[query.start, query.end]]}
    if len({tuple(v["query"][0]) for v in out.values()}) > 1:
        raise RequestError("reranker signals of one request must share one query")
    return out


def calibration(ids: Sequence[int], rerank: dict[str, Any], key: str, args: dict[str, Any], tokenizer) -> Calibration:
    start, end = next(iter(rerank.values()))["query"][0]
    content_free = tokenizer.encode(CONTENT_FREE_QUERY, add_special_tokens=False)
    calibration_ids = tuple(ids[:start]) + tuple(content_free) + tuple(ids[end:])
    spans = {signal: {**v, "query": [[start, start + len(content_free)]]} for signal, v in rerank.items()}
    extra = {"id": f"{key}#calibration", "calibration_for": key, "policies": args["policies"], "rerank": spans}
    if "bundle" in args:
        extra["bundle"] = args["bundle"]
    return Calibration(prompt_token_ids=calibration_ids, extra_args=encode_request_args(extra))
