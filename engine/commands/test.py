"""``innerguard test``: run the policy unit tests next to a policy folder."""
from __future__ import annotations

import argparse

from innerguard.engine.commands.engine_options import add_enforce_eager


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "test",
        help="run policy unit tests (POLICY_DIR/tests/*.test.yaml) on the real model inside vLLM",
        description=(
            "Load every policy in POLICY_DIR, run the cases of POLICY_DIR/tests/*.test.yaml through vLLM with "
            "those policies executing inside the worker, and compare each policy's decision with the expected "
            "action. Exit 0 when all pass, 1 when any fails, 2 when the tests cannot run."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""\
test file:
  policy: prompt-injection            # the policy 'expect: ACTION' refers to
  cases:
    - name: benign review is allowed
      instruction: Summarise the review.
      data: The blender works well.
      expect: allow                   # or {prompt-injection: block, rag-relevance: flag}
    - name: ...
      messages: [{role: system, content: ...}, {role: user, content: ...}]
      tags: [rag]
      expect: {rag-relevance: flag}
  actions: allow flag rerank drop_documents steer block not-selected
  (a policy's rule action, also in shadow and warn mode)
""",
    )
    parser.add_argument("folder", metavar="POLICY_DIR", help="folder with the policies and a tests/ subfolder")
    parser.add_argument("--model", help="model name or checkpoint folder (default: the policies' 'model:')")
    parser.add_argument("--cache-dir", help="model cache folder")
    add_enforce_eager(parser)
    parser.set_defaults(func=_test)


def _test(args: argparse.Namespace) -> int:
    from innerguard.engine.compiler import compile_policies
    from innerguard.engine.errors import InnerguardError
    from innerguard.engine.evaluate.cases import discover, format_outcome, load_cases, outcome
    from innerguard.engine.models import resolve
    from innerguard.engine.lint import load_policy_set

    files = discover(args.folder)
    policy_set, _ = load_policy_set([args.folder])
    names = {p.name for p in policy_set}
    cases = [case for path in files for case in load_cases(path, names)]
    model = args.model or next((p.model for p in policy_set if p.model), None)
    if model is None:
        raise InnerguardError("no --model given and no policy names its 'model:'")
    model_dir = resolve(model, args.cache_dir)
    plan, _ = compile_policies([args.folder], model_dir)

    from innerguard.engine.guarded import GuardedLLM

    llm = GuardedLLM(model_dir, plan, enforce_eager=args.enforce_eager)
    try:
        outputs = llm.run([c.request for c in cases])
    finally:
        llm.shutdown()
    outcomes = [outcome(c, out) for c, out in zip(cases, outputs)]
    for o in outcomes:
        print(format_outcome(o))
    failed = sum(1 for o in outcomes if not o.passed)
    print(f"{len(outcomes) - failed} passed, {failed} failed ({len(files)} files, {len(plan.policies)} policies, bundle {plan.bundle_hash[:12]})")
    return 1 if failed else 0
