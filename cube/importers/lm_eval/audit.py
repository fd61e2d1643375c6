"""lm-eval's tokenization of a label, and cube's audit of a task's cell under it.

lm-eval's tokenization (0.4.13, causal models): trailing whitespace of the context moves to the
front of the continuation, then the continuation is ``tokens(context + continuation)`` past
``len(tokens(context))``. cube instead cuts at the longest common prefix (cube.protocol.tokenization); the
two differ exactly where the label merges with the prompt's end, which the audit reports. Apart
from the records because it needs a tokenizer and no run: the audit of a protocol is the
tokenizer's verdict on its cell, with or without the run's log-likelihoods.
"""

from __future__ import annotations

from dataclasses import dataclass

from cube.importers.lm_eval.protocol import TaskProtocol
from cube.protocol.label_sets import LabelSet
from cube.protocol.tokenization import Encoder, encode_ids
from cube.tokenizers.audit import CellAudit, Context, LabelTokens, audit_cell, audit_prompt, first_token_collisions


def lm_eval_pair(tokenizer: Encoder, context: str, continuation: str,
                 add_special_tokens: bool = True) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
    """(context ids, continuation ids, boundary merge) as lm-eval 0.4's ``_encode_pair`` cuts them.

    The merge flag says the whole sequence does not start with the context's own tokens: then
    lm-eval's cut at ``len(tokens(context))`` scores shifted tokens (or none at all).
    """
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = encode_ids(tokenizer, context + continuation, add_special_tokens)
    ctx = encode_ids(tokenizer, context, add_special_tokens)
    return ctx, whole[len(ctx):], whole[:len(ctx)] != ctx


def audit_context(protocol: TaskProtocol) -> Context:
    """cube's answer context for the protocol: its cue (``normal_cue``) and its delimiter."""
    return Context(protocol.context, protocol.normal_cue, protocol.target_delimiter,
                   f"lm-eval task {protocol.task}")


@dataclass(frozen=True)
class ProtocolAudit:
    """One task's cell audited twice: as lm-eval tokenizes the labels and as cube does."""

    task: str
    lm_eval: CellAudit
    in_context: CellAudit

    @property
    def degenerate(self) -> bool:
        return self.lm_eval.degenerate

    @property
    def tokenization_differs(self) -> bool:
        return [lt.ids for lt in self.lm_eval.labels] != [lt.ids for lt in self.in_context.labels]


def audit_protocol(protocol: TaskProtocol, tokenizer: Encoder, family: str,
                   add_special_tokens: bool = True) -> ProtocolAudit | None:
    """cube's audit of the task's cell, under lm-eval's tokenization and cube's; None for cloze."""
    if protocol.labels is None:
        return None
    label_set = LabelSet(protocol.label_set, protocol.labels)
    context = audit_context(protocol)
    cube_cell = audit_cell(tokenizer, family, label_set, context)
    prompt = audit_prompt(label_set, context)
    labels = []
    for label in label_set.labels:
        _, ids, merged = lm_eval_pair(tokenizer, prompt, context.label_prefix + label, add_special_tokens)
        labels.append(LabelTokens(label, ids, tuple(tokenizer.id_to_token(i) for i in ids), merged))
    firsts = [lt.ids[0] if lt.ids else -1 for lt in labels]
    groups = first_token_collisions(firsts, label_set.labels)
    if groups:
        verdict = "DEGEN"
        collision = "full" if len(groups) == 1 and len(groups[0]) == len(label_set) else "partial"
    else:
        verdict, collision = f"max{max(len(lt.ids) for lt in labels)}tok", None
    if not all(lt.ids for lt in labels):  # a label merged into the prompt: lm-eval scored nothing
        verdict, collision = "DEGEN", "full" if not any(lt.ids for lt in labels) else "partial"
    merged = tuple(lt.label for lt in labels if lt.boundary_merge)
    lm_cell = CellAudit(family, label_set.name, context.name, verdict, collision, groups, merged, tuple(labels))
    return ProtocolAudit(protocol.task, lm_cell, cube_cell)
