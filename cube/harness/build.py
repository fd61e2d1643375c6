"""A ``RunConfig`` built into the ``RunSpec`` the runner executes, before any model loads.

Sampling (``--sample``, ``--within``), cell construction (label sets x contexts x shots x orders),
the dev items for shots, the leakage index for generations and the dtype decision, moved out of
the CLI so that a benchmark or a notebook gets the same items and cells as ``cube run`` without
argparse. Apart from ``cube.harness.run_config`` so that the runner can take its defaults from
``RunConfig`` without an import circle.
"""

from __future__ import annotations

from dataclasses import replace

from cube.errors import ConfigError
from cube.harness.run_config import RunConfig, RunSettings
from cube.harness.passes import preflight
from cube.harness.run_spec import RunSpec
from cube.records.schema import GENERATION_SCORERS

# The scorers that read only each label's first token: on a DEGEN cell their scores are a tie-break.
FIRST_TOKEN_SCORERS = ("M1-strict",)


def check_contexts(contexts: tuple[str, ...], templates: dict | None = None) -> None:
    """An unknown name is the answer-context reader's own one-line error (``load_contexts``)."""
    from cube.protocol.prompts import load_contexts

    load_contexts(contexts, templates)


def build_spec(config: RunConfig, model=None) -> RunSpec:
    """The ``RunSpec`` of ``config``: its items drawn, its cells built, every prompt tried.

    Errors come in the order a user makes them: the arguments (``RunConfig`` itself), the device,
    the model spec and the config files first, the benchmark data last, so that fixing the data
    never reveals a typo the run already had. ``model``: ``config.model`` already parsed
    (``cube.harness.model_spec.parse_model``), so that the backend reuses what was hashed and
    read here. Then the model's files are hashed (its identity),
    its size is held against the memory there is, and every cell is audited on its tokenizer
    (``RunSettings.audit``; under ``strict_audit`` a first-token scorer on a DEGEN cell is an
    error). Nothing here loads weights; a demo or GGUF model may be converted once, an hf: one
    downloaded once.
    """
    from cube.harness.backends import check_backend
    from cube.harness.model_spec import check_fits, parameter_count
    from cube.harness.precision import check_device, choose_dtype, recorded_dtype
    from cube.protocol.benchmarks import resolve
    from cube.protocol.items import stratified_sample
    from cube.protocol.label_sets import DEFAULT_LABEL_SETS, default_label_sets, select_label_sets, short_label_sets
    from cube.protocol.prompts import Cell
    from cube.records.leakage import build_index

    check_device(config.device)  # before items and the model load (torch's own errors are tracebacks)
    check_backend(config.backend)  # a missing vLLM: one line on how to get it, before items and the probe
    if model is None:
        model = model_of(config)  # a bad SPEC fails here, not at load
    bench = resolve(config.benchmark, config.card)  # a user's file is read and checked whole here
    if bench.path is not None and config.data is not None:
        raise ConfigError(f"--data {config.data} names a registered benchmark's folder; --benchmark {config.benchmark} "
                          "is already your file (drop --data)")
    templates = bench.templates()
    if config.contexts is None:  # the benchmark's own cues: an English file's "Answer:", never CMMLU's 答案：
        config = replace(config, contexts=bench.contexts)
    check_contexts(config.contexts, templates)
    chat_template = chat_template_of(model, config)  # a checkpoint without one asked for `model`: one line, here

    def cells_of(names) -> tuple[list, list]:
        label_sets = select_label_sets(list(names))
        return label_sets, [Cell(ls, ctx, n, order, chat) for ls in label_sets for ctx in config.contexts
                            for n in config.shots for order in config.orders for chat in chat_forms(config)]

    # a named set's typo or a bad order is an argument error: before the data (the default sets,
    # which the items decide, are checked here as the study's and chosen once the items are read)
    label_sets, cells = cells_of(config.label_sets or DEFAULT_LABEL_SETS)
    subjects = list(config.subjects) if config.subjects is not None else None
    root = bench.root(config.data)
    items = bench.load(root, (config.split,), subjects)
    notes = list(bench.notes)
    if config.label_sets is None:  # the sets that fit the items (every one of the split, sampled or not)
        names, note = default_label_sets([len(item.options) for item in items])
        config = replace(config, label_sets=names)
        notes += [note] if note is not None else []
        label_sets, cells = cells_of(config.label_sets)
    for option, size in (("--within", config.within), ("--sample", config.sample)):
        if size is not None and size > len(items):
            raise ConfigError(f"{option} {size} is more than the {len(items)} {config.split} items to draw from")
    if config.within is not None:
        items = stratified_sample(items, config.within, config.seed)
    if config.sample is not None:
        items = stratified_sample(items, config.sample, config.seed)
    short = short_label_sets(label_sets, [len(item.options) for item in items])
    if short is not None:
        raise ConfigError(short)
    dev = bench.load(root, ("dev",), subjects) if any(config.shots) else []
    index = None
    if set(config.scorers) & set(GENERATION_SCORERS):  # generations are scrubbed of every item's text
        index = build_index(bench.load(root, bench.present_splits(root)))
    if getattr(model, "kind", None) == "server":  # the server's precision, never this CPU's (served_precision)
        precision = served_precision_of(model, config)
        model.backend.fast.configure(precision.dtype, config.strict_audit)
    else:
        precision = choose_dtype(config.dtype, config.device, recorded=recorded_dtype(config.out, model.name))
    identity = model.identity()  # hashed in full: the folder's files, or the GGUF file
    if model.kind in ("folder", "hub"):  # a demo or GGUF model's folder is checked once converted (load_model)
        check_fits(model.name, parameter_count(model.folder()), precision.dtype, config.device)
    spec = RunSpec(
        model=model.name, items=tuple(items), cells=tuple(cells), scorers=tuple(config.scorers),
        leakage_index=index, dev_items=tuple(dev), templates=templates, shard_size=config.shard_size, batch_size=config.batch_size,
        shard=config.shard, max_new_tokens=config.max_new_tokens,
        settings=RunSettings(
            benchmark=bench.name, benchmark_sha256=bench.sha256, split=config.split, sample=config.sample, within=config.within,
            seed=config.seed, subjects=subjects, model_sha256=identity.digest, model_files=identity.files,
            model_source=model.described, device=config.device, dtype=precision.dtype,
            dtype_reason=precision.reason, backend=config.backend, config=config,
            audit=tuple(audit_cells(model, label_sets, config, chat_template, templates,
                                    max(len(i.options) for i in items))),
            chat_template=chat_template, notes=tuple(notes), **served_settings(model),
            thinking_markers=thinking_markers_of(model, templates) if index is not None else None,
        ),
    )
    preflight(spec)  # every prompt the run will build: shots, orders, label sets, names
    strict_audit(spec, config.strict_audit)
    return spec


def model_of(config: RunConfig):
    """The model ``config`` scores: a parsed ``--model SPEC``, or under ``--backend openai`` the
    model behind ``--base-url`` (``cube.harness.backends.served.ServedModel``), whose id the
    server's model list is checked for now."""
    from cube.harness.model_spec import parse_model

    if config.backend != "openai":
        return parse_model(config.model, config.trust_remote_code)
    from cube.harness.backends.served import served_model
    from cube.harness.backends.served_client import API_KEY_ENV, DEFAULT_CONCURRENCY, DEFAULT_TIMEOUT_S, ServerSettings

    settings = ServerSettings(
        base_url=config.base_url, model=config.model, revision=config.revision,
        api_key_env=config.api_key_env or API_KEY_ENV, concurrency=config.concurrency or DEFAULT_CONCURRENCY,
        timeout_s=config.request_timeout or DEFAULT_TIMEOUT_S, key_over_http=config.key_over_http)
    return served_model(settings, config.tokenizer)


def served_precision_of(model, config: RunConfig):
    """A served run's precision: what the server says, else ``--server-dtype``, else the store's
    on a resume, else not recorded (``cube.harness.backends.served_info``); no local probe."""
    from cube.harness.backends.served_info import served_precision, server_dtype
    from cube.harness.precision import recorded_dtype

    return served_precision(server_dtype(model.backend.client), config.server_dtype,
                            recorded_dtype(config.out, model.name), model.settings.model)


def served_settings(model) -> dict:
    """``RunSettings``' server fields of a served model; none for a model loaded here."""
    if getattr(model, "kind", None) != "server":
        return {}
    return {"server_url": model.settings.base_url, "served_model_id": model.settings.model,
            "served_revision": model.settings.revision,
            "audit_checked_against": model.local.described if model.local is not None else None}


def thinking_markers_of(model, templates: dict):
    """Where a generation's thinking block ends (``cube.protocol.thinking``): the model card's
    ``thinking_markers`` (config/models.yaml, a study checkpoint's entry), else the templates'
    ``generation.thinking_markers`` where they name a pair (a config folder's override), else the
    pair the model's tokenizer has among its added tokens, with their ids (a served model: its local
    tokenizer's, where cube has one), else the default ``<think>``/``</think>`` without ids."""
    from cube.protocol.thinking import DEFAULT_MARKERS, markers_of_card, markers_of_tokenizer

    named = card_markers(model.name) or markers_of_card((templates.get("generation") or {}).get("thinking_markers"),
                                                        "templates generation")
    tokenizer = None
    if getattr(model, "kind", None) == "server":
        local = getattr(model, "local", None)
        tokenizer = local.tokenizer() if local is not None else None
    else:
        tokenizer = model.tokenizer()
    if tokenizer is None or not hasattr(tokenizer, "token_to_id"):
        return named or DEFAULT_MARKERS
    found = markers_of_tokenizer(tokenizer, model.name)
    if named is None:
        return found
    ids = {m: tokenizer.token_to_id(m) for m in (named.open, named.close)}
    return replace(named, open_ids=(ids[named.open],) if ids[named.open] is not None else None,
                   close_ids=(ids[named.close],) if ids[named.close] is not None else None)


def card_markers(name: str):
    """The thinking markers a study checkpoint's entry in config/models.yaml names (its model card), or None."""
    from cube.models_config import models_config
    from cube.protocol.thinking import ThinkingMarkers

    checkpoint = models_config().checkpoints.get(name)
    if checkpoint is None or checkpoint.thinking_markers is None:
        return None
    return ThinkingMarkers(*checkpoint.thinking_markers, f"config/models.yaml checkpoint {name}")


def chat_template_of(model, config: RunConfig):
    """The checkpoint's own chat template where a cell asks for it (``--chat-template model``),
    else None; a checkpoint without one is refused in one line (``ModelSpec.chat_template``), and so
    is ``--thinking`` on a template that does not read ``enable_thinking``."""
    from cube.protocol.chat import MODEL_CHAT

    template = model.chat_template() if MODEL_CHAT in config.chat_templates else None
    if template is not None and config.thinking is not None and not template.takes_thinking:
        raise ConfigError(f"--thinking {','.join(config.thinking)}: the chat template from {template.source} does not "
                          "read enable_thinking, so it renders thinking off and on alike; run without --thinking")
    return template


def chat_forms(config: RunConfig) -> tuple[str, ...]:
    """The chat forms of a run's cells: ``--chat-template``'s values, ``model`` split by ``--thinking``
    into ``model+nothink`` and ``model+think`` (cube.protocol.chat)."""
    from cube.protocol.chat import MODEL_CHAT, chat_form

    modes = config.thinking or (None,)
    return tuple(form for chat in config.chat_templates
                 for form in ([chat_form(chat, m) for m in modes] if chat == MODEL_CHAT else [chat]))


def audit_cells(model, label_sets, config: RunConfig, chat_template=None, templates: dict | None = None,
                n_options: int | None = None) -> list:
    """Every (label set x answer context x shots x chat template) cell on the tokenizer the run
    scores with, before any weights load: the same cells ``cube audit --model`` prints. In a chat
    cell the labels are tokenized after the assistant turn's cue, where they are scored.

    A served model's cells are audited on the tokens the server reads them as; where cube also
    has its tokenizer, the same cells on that tokenizer must agree (``compare_audits``).
    ``templates``: the benchmark's prompt format; ``n_options``: the most options an item of the
    run has, so that a longer set is audited on the labels it shows (its first N)."""
    from cube.protocol.label_sets import LabelSet
    from cube.protocol.prompts import load_contexts
    from cube.tokenizers.audit import audit_run_cells

    if n_options is not None:
        label_sets = [LabelSet(ls.name, ls.labels[:n_options]) if len(ls) > n_options else ls for ls in label_sets]
    contexts, shots = load_contexts(config.contexts, templates), sorted(set(config.shots))
    served = getattr(model, "kind", None) == "server"
    if served and all(context.tokenization == "in_context" for context in contexts):
        from cube.protocol.prompts import load_templates
        from cube.tokenizers.audit import audit_prompt

        templates, texts = templates or load_templates(), []  # every plain cell's texts, in a few requests
        for label_set in label_sets:
            for context in contexts:
                for k in shots:
                    prompt = audit_prompt(label_set, context, templates, k)
                    texts += [prompt] + [prompt + context.label_prefix + label for label in label_set.labels]
        model.backend.echo(texts)

    def audit(tokenizer) -> list:
        return audit_run_cells(tokenizer, model.name, label_sets, contexts, shots, chat_forms(config),
                               chat_template, templates)

    cells = audit(model.tokenizer())
    if served and model.local is not None:
        from cube.harness.backends.served_audit import compare_audits

        local_tokenizer = model.local.tokenizer()
        ids_comparable = bool(model.backend.table.server_ids)
        compare_audits(cells, audit(local_tokenizer), model.name, ids_comparable=ids_comparable)
        if ids_comparable:  # the same ids: the local vocabulary names them (bytes, not offsets)
            model.tokenizer().local = local_tokenizer
            cells = audit(model.tokenizer())
    return cells


def degenerate_warnings(spec: RunSpec) -> list[str]:
    """One line per DEGEN cell a first-token scorer is asked to score: its scores are a tie-break."""
    scorers = [s for s in spec.scorers if s in FIRST_TOKEN_SCORERS]
    if not scorers:
        return []
    return [f"{'/'.join(scorers)} on DEGEN cell {cell.key} of {spec.model}: {cell.line().split(': ', 1)[1]}; "
            "its first-token scores tie by construction, so its predictions there are the tie-break (first "
            "option), not the model (recorded as tied; M1-seq scores the whole label)"
            for cell in spec.settings.audit if cell.cell.degenerate]


def strict_audit(spec: RunSpec, strict: bool) -> None:
    """Under ``--strict-audit``, a first-token scorer on a DEGEN cell fails the run before it starts."""
    warnings = degenerate_warnings(spec)
    if strict and warnings:
        raise ConfigError(f"--strict-audit: {warnings[0]}" + (f" (and {len(warnings) - 1} more DEGEN cells)"
                                                                if len(warnings) > 1 else ""))


__all__ = ["FIRST_TOKEN_SCORERS", "audit_cells", "build_spec", "chat_forms", "chat_template_of", "check_contexts",
           "degenerate_warnings", "model_of", "served_precision_of", "served_settings", "strict_audit",
           "card_markers", "thinking_markers_of"]
