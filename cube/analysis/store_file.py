"""The user's file a store was made on, for the readers that need more than its records.

CMMLU's and C-Eval's records are grouped by the subject maps cube ships and prompted by the
templates cube ships; a user's file names its own categories per row (``cube.protocol.user_file``)
and its prompt format by its card or its language. ``rescore --level category`` refused its
records ("no default taxonomy for benchmark ..."), and ``cube explain`` showed CMMLU's template for
both sides of two runs with different cards. The file is found where the reader names it
(``--items FILE``), else where the store's run logs say the run read it. Library functions, so that
every reader of a store (rescore, explain, the report) reads a user's file the same way.
"""

from __future__ import annotations

from pathlib import Path

from cube.errors import ConfigError
from cube.protocol.benchmarks import BENCHMARKS, resolve
from cube.protocol.taxonomy import Taxonomy


def logged_benchmark_files(records: str | Path) -> list[tuple[str, str | None]]:
    """(benchmark, card) of every run in the store's run logs that read a user's file, in log order."""
    from cube.harness.run_config import RunSettings
    from cube.records.provenance import read_run_logs

    found: list[tuple[str, str | None]] = []
    for entry in read_run_logs(records):
        config = RunSettings.from_log(entry).config
        if config is None or config.benchmark in BENCHMARKS:
            continue
        key = (config.benchmark, str(config.card) if config.card is not None else None)
        if key not in found:
            found.append(key)
    return found


def store_benchmark(records: str | Path, benchmark: str):
    """The registry entry (``cube.protocol.benchmarks.Benchmark``) the store's records of
    ``benchmark`` (the name records carry) were made on: a registered one by name, else the user's
    file a run log of the store read under that name; None where no log names one that is still there."""
    if benchmark in BENCHMARKS:
        return BENCHMARKS[benchmark]
    for path, card in logged_benchmark_files(records):
        if Path(path).exists() and (card is None or Path(card).exists()):
            entry = resolve(path, card)
            if entry.name == benchmark:
                return entry
    return None


def store_taxonomy(records: str | Path, items: str | None = None) -> Taxonomy | None:
    """The user's file's taxonomy for a store's records: of ``items`` (a file or folder) where given,
    else of the file the run logs name; None where the store holds a registered benchmark's runs only
    (their own taxonomies apply) or the file has no ``category`` column. A logged file that is no
    longer where the run read it is one line saying to give ``--items FILE``."""
    if items is not None:
        if items.split("/")[0] in BENCHMARKS and not Path(items).exists():
            return None
        return resolve(items).file_taxonomy()
    logged = logged_benchmark_files(records)
    if not logged:
        return None
    benchmark, card = logged[0]
    if not Path(benchmark).exists():
        raise ConfigError(f"{records}: its runs read {benchmark}, which is not there now; give the file with "
                          "--items FILE for its categories")
    return resolve(benchmark, card).file_taxonomy()


__all__ = ["logged_benchmark_files", "store_benchmark", "store_taxonomy"]
