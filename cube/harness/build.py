"""A ``RunConfig`` built into the ``RunSpec`` the runner executes, before any model loads.

Sampling (``--sample``, ``--within``), cell construction (label sets x contexts x shots x orders),
the dev items for shots, the leakage index for generations and the dtype decision, moved out of
the CLI so that a benchmark or a notebook gets the same items and cells as ``cube run`` without
argparse. Apart from ``cube.harness.run_config`` so that the runner can take its defaults from
``RunConfig`` without an import circle.
"""

from __future__ import annotations

from pathlib import Path

from cube.errors import ConfigError
from cube.harness.run_config import RunConfig
from cube.harness.runner import GENERATION_SCORERS, RunSpec, preflight


def check_contexts(contexts: tuple[str, ...]) -> None:
    """An unknown name is the answer-context reader's own one-line error (``load_contexts``)."""
    from cube.protocol.prompts import load_contexts

    load_contexts(contexts)


def build_spec(config: RunConfig) -> RunSpec:
    """The ``RunSpec`` of ``config``: its items drawn, its cells built, every prompt tried.

    Errors come in the order a user makes them: the arguments (``RunConfig`` itself), the device,
    the model name and the config files first, the benchmark data last, so that fixing the data
    never reveals a typo the run already had. Nothing here loads a model.
    """
    from cube.harness.models import model_source
    from cube.harness.precision import check_device, choose_dtype
    from cube.protocol.items import default_benchmark_root, load_items, stratified_sample
    from cube.protocol.label_sets import select_label_sets
    from cube.protocol.prompts import Cell
    from cube.records.leakage import build_index

    check_device(config.device)  # before items and the model load (torch's own errors are tracebacks)
    model_sha256 = model_source(config.model).gguf_sha256  # an unknown model fails here, not at load
    check_contexts(config.contexts)
    label_sets = select_label_sets(list(config.label_sets))
    cells = [Cell(ls, ctx, n, order) for ls in label_sets for ctx in config.contexts
             for n in config.shots for order in config.orders]
    subjects = list(config.subjects) if config.subjects is not None else None
    root = default_benchmark_root(config.benchmark, config.data)
    items = load_items(config.benchmark, root, splits=(config.split,), subjects=subjects)
    for option, size in (("--within", config.within), ("--sample", config.sample)):
        if size is not None and size > len(items):
            raise ConfigError(f"{option} {size} is more than the {len(items)} {config.split} items to draw from")
    if config.within is not None:
        items = stratified_sample(items, config.within, config.seed)
    if config.sample is not None:
        items = stratified_sample(items, config.sample, config.seed)
    dev = load_items(config.benchmark, root, splits=("dev",), subjects=subjects) if any(config.shots) else []
    index = None
    if set(config.scorers) & set(GENERATION_SCORERS):  # generations are scrubbed of every item's text
        splits = [s for s in ("dev", "val", "test") if (Path(root) / s).is_dir()]
        index = build_index(load_items(config.benchmark, root, splits=splits))
    precision = choose_dtype(config.dtype, config.device)
    spec = RunSpec(
        model=config.model, items=tuple(items), cells=tuple(cells), scorers=tuple(config.scorers),
        leakage_index=index, dev_items=tuple(dev), shard_size=config.shard_size, batch_size=config.batch_size,
        shard=config.shard, max_new_tokens=config.max_new_tokens,
        # The settings the cell configurations record (RECORDED_SETTINGS) and the run log carries.
        extra={"benchmark": config.benchmark, "split": config.split, "sample": config.sample,
               "within": config.within, "seed": config.seed, "subjects": subjects, "model_sha256": model_sha256,
               "device": config.device, "dtype": precision.dtype, "dtype_reason": precision.reason,
               "backend": config.backend, "command": config.command_line(), "config": config.to_log()},
    )
    preflight(spec)  # every prompt the run will build: shots, orders, label sets, names
    return spec


__all__ = ["build_spec", "check_contexts"]
