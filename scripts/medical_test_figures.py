#!/usr/bin/env python
"""Figures of a medical-topic eval from its --scores-out file (issue 32 item 5):
AUROC, TPR/FPR at the policy's threshold, FPR per style (near misses, everyday),
and FPR at TPR 90 %. `innerguard eval` reports per-style rates only for block
rules; the medical policy steers and flags, so they are computed here.

    python scripts/medical_test_figures.py SCORES.jsonl THRESHOLD
"""
import json, math, sys
path, thr = sys.argv[1], float(sys.argv[2])
rows = [json.loads(l) for l in open(path)]
def sc(r):
    s = r["signals"]
    return s.get("medical-topic-steer.medical", s.get("medical"))
ys = [(sc(r), r["label"], r.get("style")) for r in rows]
pos = sorted(s for s, y, _ in ys if y == 1); neg = [s for s, y, _ in ys if y == 0]
au = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))
cut = pos[int(math.floor(0.10 * len(pos)))]
out = {"auroc": round(au, 4), "threshold": thr,
       "tpr": round(sum(s > thr for s in pos) / len(pos), 4), "fpr": round(sum(s > thr for s in neg) / len(neg), 4),
       "nearmiss_fpr": round(sum(s > thr for s, y, st in ys if st == "near-miss") / sum(st == "near-miss" for _, _, st in ys), 4),
       "everyday_fpr": round(sum(s > thr for s, y, st in ys if st == "everyday") / sum(st == "everyday" for _, _, st in ys), 4),
       "fpr_at_tpr90": round(sum(n >= cut for n in neg) / len(neg), 4), "threshold_for_tpr90": cut,
       "nearmiss_fpr_at_tpr90": round(sum(s >= cut for s, y, st in ys if st == "near-miss") / sum(st == "near-miss" for _, _, st in ys), 4)}
print(json.dumps(out))
