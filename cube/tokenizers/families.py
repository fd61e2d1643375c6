"""Which tokenizer families a tokenizer audit covers, and the audit of all of them at once.

``cube audit`` and the book's reader summary (``cube book --param extra_label_sets=...``) both
audit every family with an offline source: the sources are chosen and checked here
(``wanted_sources``: a family without an offline source is skipped with its reason, any other
failure is an error naming it; a user's own ``--tokenizer`` is recorded by absolute path and
sha256), then audited one family per worker process (``audit_families``). It stands apart from
``cube.tokenizers.audit``, which audits tokenizers it is given, because this is the choice of
which tokenizers, and the parallel run over them, that both commands share.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cube.errors import CubeError


def wanted_sources(families: list[str] | None, own: dict[str, str], pins: dict[str, str]):
    """Each family's offline source, checked, and the families skipped for having none.

    Only a family whose config has no offline source is skipped (with its reason). Any other
    failure, a checksum above all, is an error naming the family: a skip would let ``--freeze``
    pre-register a prediction that silently lacks it.
    """
    from cube.models_config import TokenizerFamily, TokenizerSource, models_config

    config = models_config()
    wanted = {f: config.family(f) for f in (families or ([] if own else list(config.families)))}
    for name, spec in own.items():
        wanted[name] = TokenizerFamily(name, TokenizerSource(*_own_source(spec, pins.get(name))))
    offline_sources, sources, skipped = {}, {}, {}
    for family, entry in wanted.items():
        if entry.offline is None:
            skipped[family] = entry.skip_reason
            print(f"[skip] {family}: {skipped[family]}", file=sys.stderr)
            continue
        # the source as the frozen prediction records it: the remote-code opt-in where it is set,
        # so a prediction says it ran remote code
        sources[family] = offline_sources[family] = entry.offline.as_dict()
    return offline_sources, sources, skipped


def _own_source(spec: str, pin: str | None) -> tuple[str, str | None]:
    """A user's ``--tokenizer`` source as a prediction records it: a local file by its absolute
    path and its sha256 (pinned at the freeze unless given), so that ``--check`` finds the same
    file from any folder and refuses another one under its name."""
    from cube.checksums import sha256_file

    if spec.startswith(("hf:", "npm:", "pypi:")):
        return spec, pin
    path = Path(spec).expanduser()
    if path.is_file():
        return str(path.resolve()), pin or sha256_file(path)
    return spec, pin


def _audit_family(family: str, offline: dict, label_sets, contexts) -> list:
    from cube.tokenizers.audit import run_audit
    from cube.tokenizers.sources import resolve_source

    try:
        tokenizer = resolve_source(offline)
    except CubeError as exc:
        raise type(exc)(f"{family}: {exc}") from None
    return run_audit({family: tokenizer}, label_sets, contexts)


def audit_families(offline_sources: dict[str, dict], label_sets, contexts) -> list:
    """Every cell, context-major as ``run_audit`` orders them, one family per worker process.

    Deserialising a tokenizer (1.5 s for gemma's 262k-token BPE) holds the GIL and is most of an
    audit's time, so families load in parallel processes, forked on Linux so that nothing is
    imported twice; with one core or one family, in this process.
    """
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    from tqdm import tqdm

    workers = min(len(offline_sources), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
    progress = dict(desc="tokenizers", unit="family", leave=False, disable=not sys.stderr.isatty())
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        per_family = {f: _audit_family(f, o, label_sets, contexts)
                      for f, o in tqdm(offline_sources.items(), **progress)}
    else:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            futures = {f: pool.submit(_audit_family, f, o, label_sets, contexts) for f, o in offline_sources.items()}
            per_family = {f: future.result() for f, future in tqdm(futures.items(), **progress)}
    order = {ctx.name: k for k, ctx in enumerate(contexts)}
    cells = [c for f in offline_sources for c in per_family[f]]
    return sorted(cells, key=lambda c: order[c.context])  # stable: family, then label set, within
