"""Benchmark items: loading C-Eval / CMMLU CSVs and sampling them.

An item is identified by ``uid`` (benchmark/subject/split/row) and ``qhash`` (sha256 of the
question, 16 hex digits). Released records carry only these two, never benchmark text, so a
reader can join records back to the data they hold without anyone redistributing it.

Text is kept verbatim (no stripping): the hash and the prompts must be reproducible from the file
alone, and a loader that "cleans" text would silently change both.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cube.checksums import sha256_bytes
from cube.config import REPO_ROOT
from cube.errors import ChecksumError, ConfigError, ItemsError, shown_value
from cube.protocol.installed import MANIFEST_NAME, file_sha256s

ANSWER_LETTERS = ("A", "B", "C", "D")
CMMLU_HEADER = ["", "Question", "A", "B", "C", "D", "Answer"]
CEVAL_HEADER = ["id", "question", "A", "B", "C", "D", "answer", "explanation"]
# C-Eval's test split has no public answers; accept a file that leaves the two columns out.
CEVAL_TEST_HEADER = CEVAL_HEADER[:6]
CEVAL_SPLITS_WITHOUT_ANSWERS = frozenset({"test"})


def qhash(question: str) -> str:
    """The public fingerprint of a question: lets records be joined to data without its text."""
    return hashlib.sha256(question.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Item:
    benchmark: str
    subject: str
    split: str
    row: int
    question: str
    options: tuple[str, ...]
    answer: int | None  # gold option index; None where the split has no public answers
    subject_zh: str = ""  # the Chinese subject name the prompt header uses
    uid: str = field(init=False)
    qhash: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", tuple(self.options))
        if self.answer is not None and not 0 <= self.answer < len(self.options):
            raise ItemsError(
                f"item {self.benchmark}/{self.subject}/{self.split}/{self.row}: answer index "
                f"{self.answer} is outside 0..{len(self.options) - 1}"
            )
        object.__setattr__(self, "uid", f"{self.benchmark}/{self.subject}/{self.split}/{self.row}")
        object.__setattr__(self, "qhash", qhash(self.question))


# Where benchmark data is looked for, in this order (the first that holds the benchmark wins):
# an explicit folder (``--data``), ``$CUBE_BENCHMARKS/<benchmark>``, the data home that
# ``cube data fetch`` fills, and last the shared copy beside a development checkout. An explicit
# folder or ``CUBE_BENCHMARKS`` is an instruction, not a hint: if it lacks the benchmark, that is
# an error, never a silent move to the next place.
SHARED_BENCHMARKS = REPO_ROOT.parent / "shared" / "benchmarks"


def data_home() -> Path:
    """Where ``cube data fetch`` installs benchmarks: ``$CUBE_DATA``, else ``<cache>/data``."""
    from cube.config import cache_dir

    return Path(os.environ.get("CUBE_DATA") or cache_dir() / "data")


def _shared_benchmarks() -> Path:
    # Overridable so that a test (or a user) can run as on a machine without the shared copy.
    return Path(os.environ.get("CUBE_SHARED_BENCHMARKS") or SHARED_BENCHMARKS)


def benchmark_candidates(benchmark: str) -> list[tuple[str, Path]]:
    """The places looked in, in order, each with the name of the rule that put it there."""
    places = []
    if os.environ.get("CUBE_BENCHMARKS"):
        places.append(("CUBE_BENCHMARKS", Path(os.environ["CUBE_BENCHMARKS"]) / benchmark))
    places.append(("data home", data_home() / benchmark))
    places.append(("shared copy", _shared_benchmarks() / benchmark))
    return places


def _holds_items(path: Path) -> bool:
    # A folder with only a subject map (the shared C-Eval metadata) holds no benchmark.
    return path.is_dir() and any(path.glob("*/*.csv"))


def find_benchmark_root(benchmark: str, explicit: str | Path | None = None) -> Path | None:
    """The folder to read ``benchmark`` from, or None where no place holds it."""
    if explicit is not None:
        return Path(explicit) if Path(explicit).is_dir() else None
    for rule, path in benchmark_candidates(benchmark):
        if rule == "CUBE_BENCHMARKS":  # an instruction: no moving on to the next place
            return path if path.is_dir() else None
        if _holds_items(path):
            return path
    return None


def missing_benchmark_message(benchmark: str, explicit: str | Path | None = None) -> str:
    """One line: where cube looked and how to get the data."""
    if explicit is not None:
        if Path(explicit).is_file():
            return (f"{benchmark}: --data {explicit} is a file, not a benchmark folder; install it with "
                    f"`cube data fetch {benchmark} --from {explicit}` (an archive or folder of the official release), "
                    "or give --data the folder that holds its dev/ and test/")
        return (f"{benchmark}: benchmark folder {explicit} does not exist; give --data an existing folder, or leave "
                f"--data out to use `cube data list`'s lookup (`cube data fetch {benchmark}` installs one)")
    looked = ", ".join(f"{path} ({rule})" for rule, path in benchmark_candidates(benchmark))
    return (f"{benchmark}: benchmark data not found (looked in {looked}); "
            f"get it with `cube data fetch {benchmark}`, or pass --data DIR")


def default_benchmark_root(benchmark: str, explicit: str | Path | None = None) -> Path:
    """The benchmark's folder by the lookup order above; a one-line ItemsError where none holds it."""
    root = find_benchmark_root(benchmark, explicit)
    if root is None:
        raise ItemsError(missing_benchmark_message(benchmark, explicit))
    return root


# --- shared CSV reading -------------------------------------------------------------------------


def _check_recorded(path: Path, data: bytes, sha256: str | None) -> None:
    """The bytes about to be parsed against the sha256 ``cube data fetch`` recorded (if any)."""
    if sha256 is not None and (got := sha256_bytes(data)) != sha256:
        raise ChecksumError(f"{path}: sha256 {got} is not the {sha256} recorded when it was fetched "
                            f"(run `cube data fetch --force`)")


def _read_rows(path: Path, sha256: str | None = None) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header and (physical line, cells) rows; every failure names the file.

    ``sha256``: what the file must hash to (a folder ``cube data fetch`` installed records one
    per file), checked on the bytes that are parsed, so nothing is read unchecked in between.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ItemsError(f"{path}: cannot read ({exc.strerror})") from None
    _check_recorded(path, data, sha256)
    try:
        reader = csv.reader(io.StringIO(data.decode("utf-8-sig"), newline=""))
        header = next(reader, None)
        rows = [(reader.line_num, cells) for cells in reader]
    except UnicodeDecodeError as exc:
        raise ItemsError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except csv.Error as exc:
        raise ItemsError(f"{path}: malformed CSV ({exc})") from None
    if header is None:
        raise ItemsError(f"{path}: empty file (no header)")
    return header, rows


def _parse_row_index(path: Path, line: int, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ItemsError(f"{path} line {line}: row id {shown_value(value)} is not an integer") from None


def _parse_item_cells(
    path: Path, line: int, row: int, cells: list[str], answer_required: bool
) -> tuple[str, tuple[str, ...], int | None]:
    """Question, options and answer index of one row (cells: question, A, B, C, D, answer)."""
    where = f"{path} row {row} (line {line})"
    question, options, answer = cells[0], tuple(cells[1:5]), cells[5].strip()
    if not question.strip():
        raise ItemsError(f"{where}: empty question")
    for letter, text in zip(ANSWER_LETTERS, options):
        if not text.strip():
            raise ItemsError(f"{where}: option {letter} is empty")
    if answer == "" and not answer_required:
        return question, options, None
    if answer not in ANSWER_LETTERS:
        raise ItemsError(f"{where}: answer {shown_value(cells[5])} is not one of A, B, C, D")
    return question, options, ANSWER_LETTERS.index(answer)


def _select_subjects(
    found: dict[str, Path], subjects: Iterable[str] | None, folder: Path
) -> list[str]:
    if subjects is None:
        return sorted(found)
    wanted = list(subjects)
    missing = [s for s in wanted if s not in found]
    if missing:
        raise ItemsError(f"{folder}: no file for subject(s) {', '.join(missing)}")
    return sorted(set(wanted))


class _RecordedHashes:
    """The sha256 each file of a ``cube data fetch`` install must have (none for other folders).

    A file the manifest does not list was added after the fetch: an error, not extra data.
    """

    def __init__(self, root: Path) -> None:
        self.root, self.manifest = Path(root), Path(root) / MANIFEST_NAME
        self.hashes = file_sha256s(self.root)

    def __call__(self, path: Path) -> str | None:
        if self.hashes is None:
            return None
        rel = Path(path).relative_to(self.root).as_posix()
        if rel not in self.hashes:
            raise ChecksumError(f"{path}: not listed in {self.manifest} (added after the fetch)")
        return self.hashes[rel]


def _split_folder(root: Path, split: str) -> Path:
    folder = Path(root) / split
    if not folder.is_dir():
        raise ItemsError(f"split folder not found: {folder}")
    return folder


def _read_json(path: Path, sha256: str | None = None) -> dict:
    try:
        raw = path.read_bytes()
        _check_recorded(path, raw, sha256)
        data = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise ItemsError(f"subject map not found: {path}") from None
    except UnicodeDecodeError:
        raise ItemsError(f"{path}: not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise ItemsError(f"{path}: invalid JSON at line {exc.lineno}") from None
    except RecursionError:
        raise ItemsError(f"{path}: JSON nested too deep to parse") from None
    if not isinstance(data, dict):
        raise ItemsError(f"{path}: expected an object mapping subjects to their names")
    return data


def _subject_name_zh(names: dict[str, str], subject: str, source: Path) -> str:
    if subject not in names:
        raise ItemsError(f"{source}: no Chinese name for subject {subject!r}")
    return names[subject]


# --- CMMLU --------------------------------------------------------------------------------------


def _cmmlu_names_zh(root: Path, recorded: _RecordedHashes) -> tuple[dict[str, str], Path]:
    path = Path(root) / "subjects.json"
    raw = _read_json(path, recorded(path))
    names = {}
    for subject, meta in raw.items():
        if not isinstance(meta, dict) or not isinstance(meta.get("name_zh"), str):
            raise ItemsError(f"{path}: subject {subject!r} has no string 'name_zh'")
        names[subject] = meta["name_zh"]
    return names, path


def _load_cmmlu_file(path: Path, subject: str, subject_zh: str, split: str,
                     sha256: str | None = None) -> list[Item]:
    header, rows = _read_rows(path, sha256)
    if header != CMMLU_HEADER:
        raise ItemsError(f"{path}: header {','.join(header)!r} is not {','.join(CMMLU_HEADER)!r}")
    items, seen = [], set()
    for line, cells in rows:
        if len(cells) != len(CMMLU_HEADER):
            raise ItemsError(
                f"{path} line {line}: {len(cells)} columns, expected {len(CMMLU_HEADER)}"
            )
        row = _parse_row_index(path, line, cells[0])
        if row in seen:
            raise ItemsError(f"{path} row {row} (line {line}): duplicate row index")
        seen.add(row)
        question, options, answer = _parse_item_cells(
            path, line, row, cells[1:], answer_required=True
        )
        items.append(Item("cmmlu", subject, split, row, question, options, answer, subject_zh))
    return items


def load_cmmlu(
    root: Path | None = None,
    splits: Sequence[str] = ("test",),
    subjects: Iterable[str] | None = None,
) -> list[Item]:
    """CMMLU items, ordered by split, subject name, then file order."""
    root = Path(root) if root is not None else default_benchmark_root("cmmlu")
    recorded = _RecordedHashes(root)
    names_zh, names_path = _cmmlu_names_zh(root, recorded)
    items: list[Item] = []
    for split in splits:
        folder = _split_folder(root, split)
        found = {p.stem: p for p in folder.glob("*.csv")}
        for subject in _select_subjects(found, subjects, folder):
            sha256 = recorded(found[subject])  # a file added after the fetch fails first
            name_zh = _subject_name_zh(names_zh, subject, names_path)
            items.extend(_load_cmmlu_file(found[subject], subject, name_zh, split, sha256))
    return items


# --- C-Eval -------------------------------------------------------------------------------------


def _ceval_names_zh(mapping: Path, sha256: str | None = None) -> dict[str, str]:
    raw = _read_json(mapping, sha256)
    names = {}
    for subject, entry in raw.items():
        if not (isinstance(entry, list) and len(entry) >= 2 and isinstance(entry[1], str)):
            raise ItemsError(f"{mapping}: subject {subject!r} is not [English, Chinese, category]")
        names[subject] = entry[1]
    return names


def _load_ceval_file(path: Path, subject: str, subject_zh: str, split: str,
                     sha256: str | None = None) -> list[Item]:
    header, rows = _read_rows(path, sha256)
    answers_public = split not in CEVAL_SPLITS_WITHOUT_ANSWERS
    if header != CEVAL_HEADER and (answers_public or header != CEVAL_TEST_HEADER):
        raise ItemsError(f"{path}: header {','.join(header)!r} is not {','.join(CEVAL_HEADER)!r}")
    items, seen = [], set()
    for line, cells in rows:
        if len(cells) != len(header):
            raise ItemsError(f"{path} line {line}: {len(cells)} columns, expected {len(header)}")
        row = _parse_row_index(path, line, cells[0])
        if row in seen:
            raise ItemsError(f"{path} row {row} (line {line}): duplicate id")
        seen.add(row)
        answer_cell = cells[6] if len(cells) > 6 else ""
        if not answers_public and answer_cell.strip():
            raise ItemsError(
                f"{path} row {row} (line {line}): split {split!r} has no public answers "
                f"but the answer column holds {shown_value(answer_cell)}"
            )
        question, options, answer = _parse_item_cells(
            path, line, row, [*cells[1:6], answer_cell], answer_required=answers_public
        )
        items.append(Item("ceval", subject, split, row, question, options, answer, subject_zh))
    return items


def load_ceval(
    root: Path | None = None,
    splits: Sequence[str] = ("val",),
    subjects: Iterable[str] | None = None,
    mapping: Path | None = None,
) -> list[Item]:
    """C-Eval items from ``<root>/<split>/<subject>_<split>.csv``.

    The Chinese subject names come from ``mapping`` (the official ``subject_mapping.json``), else
    from ``<root>/subject_mapping.json``, else from the official map cube ships
    (``config/benchmarks/``): C-Eval's own zip carries none.
    """
    root = Path(root) if root is not None else default_benchmark_root("ceval")
    recorded = _RecordedHashes(root)
    if mapping is None:
        mapping = root / "subject_mapping.json"
        if not mapping.is_file():
            from cube.protocol.taxonomy import shipped_subject_map

            mapping = shipped_subject_map("ceval")
    in_root = Path(mapping).parent == root
    names_zh = _ceval_names_zh(Path(mapping), recorded(Path(mapping)) if in_root else None)
    items: list[Item] = []
    for split in splits:
        folder = _split_folder(root, split)
        suffix = f"_{split}"
        found = {p.stem[: -len(suffix)]: p for p in folder.glob(f"*{suffix}.csv")}
        for subject in _select_subjects(found, subjects, folder):
            sha256 = recorded(found[subject])  # a file added after the fetch fails first
            name_zh = _subject_name_zh(names_zh, subject, Path(mapping))
            items.extend(_load_ceval_file(found[subject], subject, name_zh, split, sha256))
    return items


# --- sampling -----------------------------------------------------------------------------------


def allocate_per_subject(sizes: dict[str, int], n: int) -> dict[str, int]:
    """How many items each subject gets: proportional to its size, at least one each.

    Largest-remainder rounding of ``n * size / total``, floored at 1 and capped at the size; the
    floor can overshoot ``n``, which is paid back by the subjects most above their quota. Ties go
    to the subject name, so the allocation is deterministic.
    """
    subjects = sorted(sizes)
    total = sum(sizes.values())
    if n < len(subjects):
        raise ConfigError(
            f"sample size {n} is smaller than the {len(subjects)} subjects to represent"
        )
    if n >= total:
        return dict(sizes)
    quota = {s: n * sizes[s] / total for s in subjects}
    alloc = {s: min(sizes[s], max(1, int(quota[s]))) for s in subjects}
    while sum(alloc.values()) < n:
        room = [s for s in subjects if alloc[s] < sizes[s]]
        best = max(room, key=lambda s: (quota[s] - alloc[s], -subjects.index(s)))
        alloc[best] += 1
    while sum(alloc.values()) > n:
        spare = [s for s in subjects if alloc[s] > 1]
        worst = min(spare, key=lambda s: (quota[s] - alloc[s], subjects.index(s)))
        alloc[worst] -= 1
    return alloc


def _subject_seed(seed: int, subject: str) -> list[int]:
    # Per-subject streams: adding or dropping one subject leaves the others' samples unchanged.
    return [seed, int.from_bytes(hashlib.sha256(subject.encode("utf-8")).digest()[:8], "little")]


def stratified_sample(items: Sequence[Item], n: int, seed: int) -> list[Item]:
    """``n`` items, every subject represented, proportionally; same (items, n, seed), same sample.

    Below one item per subject, ``n`` subjects are drawn (by ``seed``) and each gives one item.

    The result keeps the input order, so records written from it are in file order.
    """
    if n <= 0:
        raise ConfigError(f"sample size must be positive, got {n}")
    by_subject: dict[str, list[int]] = {}
    for index, item in enumerate(items):
        by_subject.setdefault(item.subject, []).append(index)
    if n < len(by_subject):
        # Fewer items than subjects (a first try, --sample 20): draw the subjects, one item each.
        # Samples of at least one item per subject are untouched by this branch.
        rng = np.random.default_rng([seed, len(by_subject)])
        names = sorted(by_subject)
        drawn = {names[i] for i in rng.choice(len(names), size=n, replace=False)}
        by_subject = {s: ix for s, ix in by_subject.items() if s in drawn}
    alloc = allocate_per_subject({s: len(ix) for s, ix in by_subject.items()}, n)
    chosen: list[int] = []
    for subject, indices in by_subject.items():
        rng = np.random.default_rng(_subject_seed(seed, subject))
        picks = rng.choice(len(indices), size=alloc[subject], replace=False)
        chosen.extend(indices[i] for i in picks)
    return [items[i] for i in sorted(chosen)]
