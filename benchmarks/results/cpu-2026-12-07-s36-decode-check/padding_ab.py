"""The padded span keys of decode_focus.py before (c39c571: a copy per
request) and after (one concatenation and one scatter), on this CPU:
rebuild + read, and read alone, for (requests, span tokens).

    .venv/bin/python benchmarks/results/cpu-2026-12-07-s36-decode-check/padding_ab.py
"""
import subprocess, sys, tempfile, time, torch, importlib.util
from pathlib import Path
from types import SimpleNamespace
from innerguard.hooks.analyzers.attention import HeadGeometry
from innerguard.hooks.analyzers.attention_tracker import span_keys
from innerguard.hooks import decode_focus as new
OLD = Path(tempfile.mkdtemp()) / "old_focus.py"
OLD.write_text(subprocess.run(["git", "show", "c39c571:hooks/decode_focus.py"], capture_output=True, text=True, check=True).stdout)
spec = importlib.util.spec_from_file_location("old_focus", OLD); old = importlib.util.module_from_spec(spec); sys.modules["old_focus"] = old; spec.loader.exec_module(old)
torch.set_num_threads(2)
geometry = HeadGeometry(num_heads=9, num_kv_heads=3, head_dim=64)
for m, S in ((64, 40), (8, 1100), (640, 480)):
    g = torch.Generator().manual_seed(0)
    keys = [span_keys(torch.randn(S + 5, 3 * 64, generator=g), [0, 4, 8], [(0, S // 3)], [(S // 3, S)], geometry) for _ in range(m)]
    members = [SimpleNamespace(state=SimpleNamespace(decode=SimpleNamespace(span_keys={"s": {7: k}}))) for k in keys]
    q = torch.randn(m, 9 * 64)
    for name, fn in (("old", lambda: old._batched_shares(q, old._padded({}, "s", 7, members, 0.125), geometry)),
                     ("new", lambda: new._batched_shares(q, new._padded({}, "s", 7, members), geometry, 0.125))):
        fn(); t = time.perf_counter(); n = 20
        for _ in range(n): out = fn()
        print(m, S, name, "rebuild+read ms", round(1000 * (time.perf_counter() - t) / n, 3))
    po, pn = old._padded({}, "s", 7, members, 0.125), new._padded({}, "s", 7, members)
    for name, fn in (("old", lambda: old._batched_shares(q, po, geometry)), ("new", lambda: new._batched_shares(q, pn, geometry, 0.125))):
        fn(); t = time.perf_counter(); n = 50
        for _ in range(n): out = fn()
        print(m, S, name, "read ms", round(1000 * (time.perf_counter() - t) / n, 3))
    print("max diff", (old._batched_shares(q, po, geometry) - new._batched_shares(q, pn, geometry, 0.125)).abs().max().item())
