"""SmolLM2's own answers to the third-party injection rows, as labelled
completions for ``innerguard build token-probe --generated`` and
``innerguard eval`` (the examples/injection-answer data).

    .venv/bin/python benchmarks/make_injection_answers.py [--out data/injection-answers] [--max-tokens 48]

The prompts are data/injection/real-fit.jsonl (fit) and real-test.jsonl
(held-out): third-party carriers (mailing-list e-mails, docs, code, web
pages, tables) with third-party attacks inserted in half of them
(data/injection/README.md). Rows are kept by length alone (fit: at most
768 tokens, held-out: at most 1,024, as the data file counts them), so that
the answers, the build and the evaluation fit the 2-core machine; nothing
else chooses them.

Each answer is the model's greedy completion (plain vLLM with the guarded
engine's settings: eager, float32 on CPU; ``--max-tokens``). The label is the prompt's: 1 when
the untrusted data carries an injected instruction, whatever the model did
with it. That is a weak label for "the answer follows the injection": some
label-1 answers ignore the attack, so a probe on the answer is scored against
a target it can only partly see (the README says so next to its figures).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPLITS = {"fit": ("real-fit.jsonl", 768), "held-out": ("real-test.jsonl", 1024)}
KEEP = ("id", "label", "style", "source", "carrier", "group", "licence")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "data" / "injection-answers"), help="folder for answers-{fit,held-out}.jsonl")
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # one engine, this process

    from vllm import SamplingParams

    from innerguard.engine import models
    from innerguard.engine.vllm_engine import engine_kwargs, start_llm

    splits = {}
    for split, (name, most) in SPLITS.items():
        rows = [json.loads(line) for line in (ROOT / "data" / "injection" / name).read_text().splitlines()]
        splits[split] = [r for r in rows if r["tokens"] <= most]
    # The guarded engine's settings (float32 on CPU: bfloat16 is ten times slower there).
    llm = start_llm(**engine_kwargs(str(models.prepare("smollm2-135m-instruct")), eager=True))
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        chats = [[{"role": "system", "content": r["instruction"]}, {"role": "user", "content": r["data"]}] for r in rows]
        answers = llm.chat(chats, params, use_tqdm=True)
        lines = []
        for row, chat, answer in zip(rows, chats, answers):
            text = answer.outputs[0].text
            lines.append(json.dumps({**{k: row[k] for k in KEEP if k in row}, "messages": chat,
                                     "completion": text if text.strip() else "."}, ensure_ascii=False))
        (out / f"answers-{split}.jsonl").write_text("\n".join(lines) + "\n")
        print(f"{split}: {len(rows)} rows ({sum(r['label'] for r in rows)} injected) -> {out / f'answers-{split}.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
