"""The benchmark registry: one entry per benchmark, read by everything that needs one.

Adding a benchmark used to touch seven to nine files (the loaders' table, the taxonomy table, the
prompt header, the fetch's parse, the release manifest's licences, the leakage audit that loaded
CMMLU only, the CLI's choices). Now sampling, shots, ``cube run``, ``cube rescore --items``,
``cube data list``, the release manifest's licences, the leakage audit and scrub and the book's
``requires`` read ``BENCHMARKS`` (or ``resolve`` for a user's file), not names.

A new benchmark in code is one ``Benchmark`` entry here plus its loader (README: Your benchmark).
A user's file (``cube run --benchmark PATH``) becomes an entry of the same type at run time
(``resolve``), so every path treats the two alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cube.errors import ConfigError
from cube.protocol.items import Item, default_benchmark_root, load_ceval, load_cmmlu

Loader = Callable[..., list[Item]]  # (root, splits=..., subjects=...) -> items
NO_CATEGORY = "(no category)"  # a user's subject whose rows name no category


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: how its items are read and how its prompts are written.

    ``loader`` reads ``root`` (found by ``cube data list``'s lookup, or given); ``splits`` are the
    splits it may have, ``answered_splits`` those with public answers; ``taxonomy`` names its
    subject map in ``cube.protocol.taxonomy`` (None: none); ``prompt_format`` a format of
    config/templates.yaml (None: the exam format); ``contexts`` its default answer contexts;
    ``licence`` and ``source`` what a release says about its items.
    """

    name: str
    title: str
    loader: Loader
    splits: tuple[str, ...]
    answered_splits: tuple[str, ...]
    taxonomy: str | None
    prompt_format: str | None
    contexts: tuple[str, ...]
    licence: str
    source: str
    # A user's file: its folder or file (``root`` ignores --data), its card's templates, its sha256.
    path: Path | None = None
    template_overrides: dict = field(default_factory=dict, compare=False)
    extra_contexts: dict = field(default_factory=dict, compare=False)
    sha256: str | None = None
    user: object | None = field(default=None, compare=False, repr=False)  # the UserBenchmark read
    # What was chosen for the user because the file did not say (its language's prompt format):
    # lines ``cube run`` prints, so that a default is never silent
    notes: tuple[str, ...] = field(default=(), compare=False)

    def root(self, explicit: str | Path | None = None) -> Path:
        """Where its items are read from: the user's path, else the lookup (``--data`` first)."""
        if self.path is not None:
            return self.path
        return default_benchmark_root(self.name, explicit)

    def load(self, root: Path | None = None, splits: Sequence[str] | str = ("test",),
             subjects: Iterable[str] | None = None) -> list[Item]:
        """Its items of ``splits`` (a list, or ``"dev,test"``) and ``subjects``, in file order."""
        if isinstance(splits, str):
            splits = [s for s in re.split(r"[,\s]+", splits) if s]
        return self.loader(root if root is not None else self.root(), splits=list(splits), subjects=subjects)

    def present_splits(self, root: Path) -> list[str]:
        """The splits a folder (or a user's file) actually holds: the leakage index reads them all."""
        if self.user is not None:
            return sorted({i.split for i in self.user.items}, key=list(self.splits).index)
        return [s for s in self.splits if (Path(root) / s).is_dir()]

    def templates(self) -> dict:
        """The templates its prompts are rendered with (``cube.protocol.prompts.templates_for``)."""
        from cube.protocol.prompts import templates_for

        return templates_for(self.prompt_format, self.template_overrides, self.extra_contexts)

    def file_taxonomy(self):
        """A user's file's own taxonomy (``cube.protocol.taxonomy.Taxonomy``): each subject in the
        category its rows' ``category`` column gives (``NO_CATEGORY`` for a subject whose rows give
        none); None for a registered benchmark or a file without the column."""
        if self.user is None or not self.user.categories:
            return None
        from cube.protocol.taxonomy import Taxonomy

        subjects = sorted({item.subject for item in self.user.items})
        return Taxonomy(self.name, {s: (self.user.categories.get(s, NO_CATEGORY),) for s in subjects}, {}, self.path)

    def licence_note(self) -> dict[str, str]:
        """What a release manifest lists for it (``benchmark_licences``)."""
        return {"name": self.title, "licence": self.licence, "source": self.source}


BENCHMARKS: dict[str, Benchmark] = {
    "cmmlu": Benchmark(
        name="cmmlu", title="CMMLU", loader=load_cmmlu, splits=("dev", "test"), answered_splits=("dev", "test"),
        taxonomy="cmmlu", prompt_format=None, contexts=("zh_cue",), licence="CC BY-NC-SA 4.0",
        source="https://github.com/haonan-li/CMMLU"),
    "ceval": Benchmark(
        name="ceval", title="C-Eval", loader=load_ceval, splits=("dev", "val", "test"), answered_splits=("dev", "val"),
        taxonomy="ceval", prompt_format=None, contexts=("zh_cue",), licence="CC BY-NC-SA 4.0",
        source="https://github.com/hkust-nlp/ceval"),
}


def benchmark(name: str) -> Benchmark:
    """A registered benchmark by name; one line naming the known ones (and the path form) otherwise."""
    if name not in BENCHMARKS:
        raise ConfigError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}, or the path of your own "
                          ".jsonl/.csv/.parquet file or folder (README: Your benchmark)")
    return BENCHMARKS[name]


def user_benchmark(path: str | Path, card: str | Path | None = None) -> Benchmark:
    """A user's file or folder as a registry entry: read and checked whole, here, before any model loads."""
    from cube.protocol.user_file import UserBenchmark

    user = UserBenchmark.read(path, card)
    c = user.card

    def loader(root: Path, splits: Sequence[str] = ("test",), subjects: Iterable[str] | None = None) -> list[Item]:
        return user.load(splits, subjects)

    prompt_format, notes = c.prompt_format(), ()
    if c.language is None and c.format is None:  # the card says nothing: the questions decide
        prompt_format, notes = detected_format(user)
    default_context = "en_label_space" if prompt_format == "en_mcq" else "zh_cue"
    contexts = tuple(c.contexts) or (default_context,)
    return Benchmark(
        name=c.name, title=c.title or c.name, loader=loader, splits=("dev", "val", "test"),
        answered_splits=("dev", "val", "test"), taxonomy=None, prompt_format=prompt_format, contexts=contexts,
        licence=c.licence, source=c.source or str(path), path=Path(path),
        template_overrides=c.template_overrides(), extra_contexts=c.contexts, sha256=user.sha256, user=user,
        notes=notes)


def detected_format(user) -> tuple[str | None, tuple[str, ...]]:
    """The prompt format of a file whose card names no language (``cube.protocol.language``):
    ``en_mcq`` for English questions, the exam format (None) for Chinese or mixed ones; and the line
    that says what was chosen and how to choose otherwise (none for a Chinese file, whose format is
    the one it always had)."""
    from cube.protocol.language import detect_language
    from cube.protocol.user_file import card_path

    found = detect_language([item.question for item in user.items])
    card = card_path(user.path) or (user.path / "card.yaml" if user.path.is_dir()
                                    else user.path.with_name(user.path.stem + ".card.yaml"))
    choose = f"set `language: en` or `language: zh` in a card ({card})"
    if found.language == "en":
        return "en_mcq", (f"{user.path}: English questions ({found.counted()}), no card language: the English "
                          f"prompt format en_mcq, cue en_label_space; to choose, {choose}",)
    if found.language == "mixed":
        return None, (f"{user.path}: mixed languages ({found.counted()}): every item gets the exam format "
                      f"(CMMLU's Chinese header, cue zh_cue); to choose, {choose}, or split the file by language",)
    return None, ()


def resolve(spec: str, card: str | Path | None = None) -> Benchmark:
    """``--benchmark``'s value as an entry: a registered name, else the path of a user's file or folder."""
    from cube.protocol.user_file import looks_like_user_benchmark

    if spec in BENCHMARKS:
        if card is not None:
            raise ConfigError(f"--card describes your own file; {spec} is a registered benchmark (drop --card)")
        return BENCHMARKS[spec]
    if looks_like_user_benchmark(spec):
        return user_benchmark(spec, card)
    return benchmark(spec)


def load_items(name: str, root: Path | None = None, splits: Sequence[str] | str = ("test",),
               subjects: Iterable[str] | None = None) -> list[Item]:
    """The items of a benchmark (by name or path); ``root`` defaults to the lookup of ``cube data list``."""
    return resolve(name).load(root, splits, subjects)


def taxonomy_of(name: str) -> str:
    """The taxonomy a benchmark's records are grouped with: its registry entry's; records of no
    registered benchmark (``sim``) by ``cube.protocol.taxonomy``'s own table."""
    from cube.protocol.taxonomy import taxonomy_for_benchmark

    entry = BENCHMARKS.get(name)
    if entry is not None and entry.taxonomy is not None:
        return entry.taxonomy
    return taxonomy_for_benchmark(name)


def benchmark_licences() -> dict[str, dict[str, str]]:
    """Every registered benchmark's licence note, as a release manifest lists them."""
    return {name: entry.licence_note() for name, entry in BENCHMARKS.items()}


__all__ = ["BENCHMARKS", "NO_CATEGORY", "Benchmark", "benchmark", "benchmark_licences", "load_items", "resolve", "taxonomy_of",
           "detected_format", "user_benchmark"]
