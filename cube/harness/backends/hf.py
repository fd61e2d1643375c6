"""The transformers backend: the default harness engine, on CPU or CUDA, bf16 or fp32.

Why it is fast where the usual harnesses are slow:

1. All requests of one ``score`` call run as one prefix tree (``prefix_tree``): each run of
   tokens that several requests or continuations share (a subject's header, an item's question
   across every label set and cloze, a 5-shot block) goes through the model ONCE, and its KV
   cache is copied row-wise to every node below it. A subtree of at most ``pack_tokens`` (an
   item's question with every cell below it) runs as one packed row under a tree mask instead
   (``packing``): no copy per child, a few large forwards. A single-token label (``A``) needs no
   extra forward at all: its log-probability is read off its parent's last position. The forward
   tokens are then exactly the prefix-tree minimum (``counter.tree_minimum_tokens``).
2. The output layer (a vocabulary-sized matmul, the largest in a small model) runs ONLY at the
   positions being scored, not at every position of every sequence. For a bf16 model it runs in
   bf16 (3-5x faster on AMX CPUs) for the log-normaliser only, while each scored token's own logit
   is an fp32 dot product: so distinct labels never tie by rounding.
3. Requests are batched sorted by length and cut where padding plus a forward's own overhead is
   least (``token_batches``), so padding stays small: ``counter.padded_tokens`` against
   ``counter.forward_tokens`` says how small.

Correctness is checked token by token against ``ReferenceBackend`` in the parity tests.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
from tqdm import tqdm

from cube.errors import CubeError
from cube.harness.backends.attention import use_gqa_sdpa
from cube.harness.backends.base import (
    Backend,
    ContinuationLogprobs,
    ForwardCounter,
    GenerationResult,
    finish_reason,
    RequestPlan,
    ScoreRequest,
    batches,
    count_plans,
    plan_request,
    token_batches,
)
from cube.harness.backends.kv_cache import preallocate
from cube.harness.backends.packing import pack_rows, subtree_sizes
from cube.harness.backends.prefix_tree import Segment, plan_tree, tree_tokens
from cube.protocol.tokenization import Encoder, encode_ids


def eos_token_ids(model) -> frozenset[int]:
    """The ids that end a greedy generation: from the generation config, else the model config."""
    ids: set[int] = set()
    for cfg in (getattr(model, "generation_config", None), model.config):
        value = getattr(cfg, "eos_token_id", None) if cfg is not None else None
        if value is None:
            continue
        ids.update([value] if isinstance(value, int) else value)
    return frozenset(ids)


def packing_supported(model) -> bool:
    """Packed rows need an attention that takes a boolean 4-D mask as it is: torch's SDPA (and
    cube's copy-free variant of it) does; eager attention adds the mask to its scores instead."""
    from cube.harness.backends.attention import IMPLEMENTATION

    return getattr(model.config, "_attn_implementation", None) in ("sdpa", IMPLEMENTATION)


def sliding_window(config) -> int | None:
    """The window of a model with sliding-window layers (Gemma 3, Mistral), else None."""
    window = getattr(config, "sliding_window", None)
    if not window:
        return None
    kinds = getattr(config, "layer_types", None)
    if kinds is not None and "sliding_attention" not in kinds:
        return None
    if getattr(config, "use_sliding_window", True) is False:
        return None
    return int(window)


def layer_masks(config, seen, key_pos, query_pos, window: int, additive_dtype=None):
    """The attention masks of a sliding-window model, built from true positions: a dict by layer
    type for a model that names its layers' types (Gemma 3), else one mask (every layer slides).

    Why cube builds them itself: transformers derives the window from a key's index in the KV
    cache, and its sliding cache layer keeps only the last ``window - 1`` cache entries. Both are
    right only for one unpadded sequence. In a prefix tree a parent's cache row carries right
    padding and a packed row holds several sequences, so the index is not the position: queries
    below the window lost real keys to padding, and past it packed rows saw keys outside it
    (issue 32). Here a key is visible to a query at a sliding layer iff it is visible at a full
    layer (``seen``: the query's own sequence, not after it) and ``query_pos - key_pos < window``,
    transformers' own rule (``masking_utils.sliding_window_overlay``) on positions.

    ``seen`` is (batch, queries, keys) bool, the positions (batch, keys) and (batch, queries).
    ``additive_dtype``: eager attention adds its mask to the scores, so it gets 0 / the dtype's
    minimum (as transformers' own eager masks) instead of booleans.
    """
    import torch

    sliding = seen & ((query_pos[:, :, None] - key_pos[:, None, :]) < window)

    def form(mask):
        mask = mask.unsqueeze(1)
        if additive_dtype is None:
            return mask
        return torch.zeros(mask.shape, dtype=additive_dtype, device=mask.device).masked_fill(
            ~mask, torch.finfo(additive_dtype).min)

    kinds = getattr(config, "layer_types", None)
    if kinds is None:
        return form(sliding)
    unknown = sorted(set(kinds) - {"full_attention", "sliding_attention"})
    if unknown:
        raise CubeError(f"layer types {unknown}: cube builds masks for full and sliding attention only; "
                        "score this model with the reference backend")
    return {"full_attention": form(seen), "sliding_attention": form(sliding)}


def _select_cache_rows(cache, rows):
    """A new cache holding ``rows`` of ``cache`` (with repeats); ``cache`` itself stays intact.

    Cache layers grow by concatenation into new tensors, so shallow-copied layers with re-indexed
    tensors never write into the shared prefix's cache.
    """
    sub = copy.copy(cache)
    sub.layers = [copy.copy(layer) for layer in cache.layers]
    sub.batch_select_indices(rows)
    return sub


class HFBackend(Backend):
    @classmethod
    def from_config(cls, model: str, dtype: str | None = None, device: str | None = None, **options) -> HFBackend:
        """``--model SPEC`` (a string or a parsed ``ModelSpec``), loaded and verified by ``load_model``
        once its weights are known to fit in the memory there is (one line, not an OOM kill)."""
        from cube.harness.model_spec import check_config_size, check_fits, parameter_count, parse_model
        from cube.harness.models import load_model

        spec = parse_model(str(model)) if isinstance(model, (str, Path)) else model
        check_config_size(spec.folder(), spec.trust_remote_code)  # before anything is allocated
        check_fits(spec.name, parameter_count(spec.folder()), dtype or "bfloat16", device or "cpu")
        loaded, tokenizer = load_model(spec, dtype, device or "cpu")
        return cls(loaded, tokenizer, **options)

    def __init__(
        self, model, tokenizer: Encoder, add_special_tokens: bool = True,
        eos_ids: frozenset[int] | None = None, max_batch_tokens: int = 2048, head_chunk: int = 256,
        progress: bool = True, batch_cost: int = 64, pack_tokens: int = 512,
    ):
        import torch

        self.torch = torch
        self.model = model.eval()
        use_gqa_sdpa(model)  # padded batches on CPU: no KV copy per query head (backends.attention)
        self.body = model.base_model  # the decoder stack without the output layer
        self.head = model.get_output_embeddings()
        self.head_native = self.head.weight.detach()
        bias = getattr(self.head, "bias", None)
        self.head_bias_native = None if bias is None else bias.detach()
        self.head_bias = None if bias is None else bias.detach().float()
        self._head_fp32 = None
        self.softcap = getattr(model.config, "final_logit_softcapping", None)
        self.device = next(model.parameters()).device
        self.tokenizer = tokenizer
        self.add_special_tokens = add_special_tokens
        self.eos_ids = eos_token_ids(model) if eos_ids is None else frozenset(eos_ids)
        self.max_batch_tokens = max_batch_tokens  # padded tokens per forward, besides batch_size rows
        self.batch_cost = batch_cost  # a forward's overhead in tokens, against padding (token_batches)
        self.head_chunk = head_chunk
        self.progress = progress
        # a subtree of at most this many tokens runs as one packed row (``packing``); 0: node by node
        self.pack_tokens = pack_tokens if packing_supported(model) else 0
        # a sliding-window model gets its masks from cube (``layer_masks``) and a cache that keeps
        # every key (``_full_cache``), on every path: node by node, packed, eager
        self.pack_window = sliding_window(model.config)
        self.additive_masks = getattr(model.config, "_attn_implementation", None) == "eager"
        self.pad_id = 0  # any valid id: padded positions are masked out and never scored
        self.counter = ForwardCounter()
        self._check_head_matches_model()

    # -- the model split in two: body (all positions) and head (scored positions only) ----------

    @property
    def head_weight(self):
        """The output layer in fp32 (made on first use: a bf16 model's scoring never needs it)."""
        if self._head_fp32 is None:
            self._head_fp32 = self.head_native.float()
        return self._head_fp32

    def _capped(self, logits):
        if self.softcap:
            logits = self.torch.tanh(logits / self.softcap) * self.softcap
        return logits

    def _logits(self, hidden):
        # fp32 even for a bf16 model (generation's argmax): bf16 logits are coarse enough to make
        # distinct tokens tie exactly.
        return self._capped(self.torch.nn.functional.linear(hidden.float(), self.head_weight, self.head_bias))

    def _log_normaliser(self, hidden):
        """logsumexp of the row's logits; from a model-dtype matmul (bf16 on AMX is 3-5x faster).

        The bf16 rounding of each logit (relative 2**-9) moves the normaliser of a row by about as
        much as the bf16 model's own logits move; it is shared by every token scored at that row,
        so a label's rank and its share of the label distribution do not depend on it at all.
        """
        if self.head_native.dtype == self.torch.float32:
            return self.torch.logsumexp(self._logits(hidden), dim=-1)
        logits = self.torch.nn.functional.linear(hidden, self.head_native, self.head_bias_native)
        return self.torch.logsumexp(self._capped(logits.float()), dim=-1)

    def _token_logits(self, hidden, tokens):
        """fp32 logit of ``tokens[k]`` at ``hidden[k]``: one dot product per scored token."""
        rows = self.head_native[tokens].float()
        logits = (hidden.float() * rows).sum(-1)
        if self.head_bias is not None:
            logits = logits + self.head_bias[tokens]
        return self._capped(logits)

    def _check_head_matches_model(self) -> None:
        """Refuse a model whose logits are not ``head(body(x))``: we would score it wrongly."""
        torch = self.torch
        ids = torch.tensor([[1, 2, 3, 4, 5]], device=self.device)
        with torch.inference_mode():
            full = self.model(input_ids=ids).logits[0, -1].float()
            hidden = self.body(input_ids=ids).last_hidden_state[0, -1:]
            tokens = torch.arange(min(64, full.shape[0]), device=self.device)
            full, ours = full[tokens], self._token_logits(hidden.expand(len(tokens), -1), tokens)
        tol = 1e-2 * (1.0 + float(full.abs().max()))
        if float((full - ours).abs().max()) > tol:
            raise CubeError(
                f"{type(self.model).__name__}: logits are not lm_head(last hidden state); "
                "score this model with the reference backend"
            )

    def _full_cache(self, cache):
        """For a sliding-window model, a cache whose layers keep every key (a plain ``DynamicCache``
        with no config): the window is in the masks, not in what the cache drops."""
        if cache is not None or self.pack_window is None:
            return cache
        from transformers.cache_utils import DynamicCache

        return DynamicCache()

    def _masks(self, seen, key_pos, query_pos):
        """What ``body`` takes as its mask for these (batch, queries, keys) visibilities: the
        4-D boolean mask itself, or by layer type for a sliding-window model (``layer_masks``)."""
        if self.pack_window is None:
            return seen.unsqueeze(1)
        dtype = self.head_native.dtype if self.additive_masks else None
        return layer_masks(self.model.config, seen, key_pos, query_pos, self.pack_window, dtype)

    def _run_body(self, ids, mask, positions, cache=None, n_real: int | None = None):
        out = self.body(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True,
        )
        if n_real is None:
            n_real = int(mask[:, -ids.shape[1]:].sum())
        self.counter.forward_tokens += n_real
        self.counter.padded_tokens += ids.numel()
        self.counter.forwards += 1
        return out.last_hidden_state, out.past_key_values

    def _left_padded(self, seqs: list[tuple[int, ...]]):
        torch = self.torch
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for b, seq in enumerate(seqs):
            ids[b, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
            mask[b, width - len(seq):] = 1
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        return ids.to(self.device), mask.to(self.device), positions.to(self.device)

    # -- scoring ----------------------------------------------------------------------------------

    def score(self, requests: list[ScoreRequest], batch_size: int = 16) -> list[list[ContinuationLogprobs]]:
        """Every request at once, as one prefix tree (``prefix_tree``): each shared run of tokens
        (a subject's header, an item's question, a 5-shot block) is computed once, on a copy of
        its parent's KV cache, however many cells and continuations share it."""
        plans = [plan_request(self.tokenizer, r, self.add_special_tokens) for r in requests]
        root, where = plan_tree(plans)
        total = tree_tokens(root)
        count_plans(self.counter, plans, tree_minimum=total)
        sizes, ends = subtree_sizes(root)
        with self.torch.inference_mode(), tqdm(
            total=total, desc="score", unit="tok", disable=not self.progress
        ) as bar:
            self._run_tree(root.children, None, None, [None] * len(root.children), batch_size, bar,
                           (sizes, ends), None)
            return self._read_scores(plans, where)

    def _packable(self, node: Segment, sizes) -> bool:
        tokens, _ = sizes
        # past a sliding window too: the packed row's masks are by layer type (``layer_masks``)
        return bool(self.pack_tokens) and tokens[id(node)] <= self.pack_tokens

    def _run_tree(self, nodes: list[Segment], parent_cache, parent_mask, parent_rows: list,
                  batch_size: int, bar, sizes, parent_pos) -> None:
        """Run ``nodes`` on their parents' cache rows and keep the hidden states at their scored
        positions: a node whose whole subtree is small runs with that subtree as one packed row
        (``_run_packed``); any other runs alone (batched by length, right-padded), then its
        children on the new cache.

        Depth first, batch by batch, so only the caches on the current path are alive. Right
        padding is never seen: a node's own tokens come before its pads, and its children's mask
        hides them. ``parent_pos`` holds each cache column's position id, which a sliding window
        is measured in (``layer_masks``); None for a model without one.
        """
        packed = [i for i, node in enumerate(nodes) if self._packable(node, sizes)]
        if packed:
            self._run_packed([nodes[i] for i in packed], parent_cache, parent_mask,
                             [parent_rows[i] for i in packed], batch_size, bar, sizes[0], parent_pos)
            if len(packed) == len(nodes):
                return
            chosen = set(packed)
            rest = [i for i in range(len(nodes)) if i not in chosen]
            nodes, parent_rows = [nodes[i] for i in rest], [parent_rows[i] for i in rest]
        torch = self.torch
        order = sorted(range(len(nodes)), key=lambda i: len(nodes[i]), reverse=True)
        lengths = [len(nodes[i]) for i in order]
        for chunk in token_batches(order, lengths, batch_size, self.max_batch_tokens, self.batch_cost):
            width = max(len(nodes[i]) for i in chunk)
            ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
            own = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, i in enumerate(chunk):
                ids[r, :len(nodes[i])] = torch.tensor(nodes[i].tokens, dtype=torch.long)
                own[r, :len(nodes[i])] = 1
            starts = torch.tensor([nodes[i].start for i in chunk]).unsqueeze(1)
            positions = (starts + torch.arange(width).unsqueeze(0)).to(self.device)
            own = own.to(self.device)
            key_pos = positions
            if parent_cache is None:
                mask, cache = own, None
            else:
                rows = torch.tensor([parent_rows[i] for i in chunk], device=self.device)
                mask, cache = torch.cat([parent_mask[rows], own], dim=1), _select_cache_rows(parent_cache, rows)
                if self.pack_window is not None:
                    key_pos = torch.cat([parent_pos[rows], positions], dim=1)
            if self.pack_window is None:
                body_mask = mask  # 2-D: transformers makes it causal
            else:  # a key is seen if it is real and not after the query (parents' all come before)
                seen = mask.bool()[:, None, :] & (key_pos[:, None, :] <= positions[:, :, None])
                body_mask = self._masks(seen, key_pos, positions)
            hidden, cache = self._run_body(ids.to(self.device), body_mask, positions, self._full_cache(cache),
                                           n_real=int(own.sum()))
            for r, i in enumerate(chunk):
                node = nodes[i]
                if node.scored:
                    node.hidden = hidden[r, [p - node.start for p in node.scored]]
            bar.update(sum(len(nodes[i]) for i in chunk))
            children = [(child, r) for r, i in enumerate(chunk) for child in nodes[i].children]
            if children:
                self._run_tree([c for c, _ in children], cache, mask, [r for _, r in children], batch_size,
                               bar, sizes, key_pos if self.pack_window is not None else None)

    def _run_packed(self, units: list[Segment], parent_cache, parent_mask, parent_rows: list,
                    batch_size: int, bar, tokens: dict[int, int], parent_pos=None) -> None:
        """Whole subtrees, packed into rows (``packing.pack_rows``) and run in a few large forwards
        under a tree mask; nothing below them runs again, so their own cache is dropped."""
        torch = self.torch
        rows = pack_rows(units, parent_rows, tokens, self.pack_tokens)
        order = sorted(range(len(rows)), key=lambda r: rows[r].length, reverse=True)
        lengths = [rows[r].length for r in order]
        for chunk in token_batches(order, lengths, batch_size, self.max_batch_tokens, self.batch_cost):
            width = max(rows[r].length for r in chunk)
            ids = torch.from_numpy(np.stack([rows[r].tokens(width, self.pad_id) for r in chunk]))
            positions = torch.from_numpy(np.stack([rows[r].positions(width) for r in chunk]))
            mask = torch.from_numpy(np.stack([rows[r].mask(width) for r in chunk])).to(self.device)
            positions = positions.to(self.device)
            key_pos = positions
            cache = None
            if parent_cache is not None:
                index = torch.tensor([rows[r].parent_row for r in chunk], device=self.device)
                seen = parent_mask[index].bool()  # the parent's own right padding stays hidden
                mask = torch.cat([seen.unsqueeze(1).expand(-1, width, -1), mask], dim=2)
                cache = _select_cache_rows(parent_cache, index)
                if self.pack_window is not None:
                    key_pos = torch.cat([parent_pos[index], positions], dim=1)
            n_real = sum(rows[r].length for r in chunk)
            hidden, _ = self._run_body(ids.to(self.device), self._masks(mask, key_pos, positions), positions,
                                       self._full_cache(cache), n_real=n_real)
            for b, r in enumerate(chunk):
                for node, offset in zip(rows[r].nodes, rows[r].offsets):
                    if node.scored:
                        node.hidden = hidden[b, [offset + p - node.start for p in node.scored]]
            bar.update(n_real)

    def _read_scores(self, plans: list[RequestPlan], where) -> list[list[ContinuationLogprobs]]:
        """Each scored token's log-probability from the hidden state the tree kept for it."""
        torch = self.torch
        pieces, base, row_idx = [], {}, []
        for per_plan in where:
            for per_cont in per_plan:
                for node, position in per_cont:
                    if id(node) not in base:
                        base[id(node)] = (sum(len(p) for p in pieces), {q: k for k, q in enumerate(node.scored)})
                        pieces.append(node.hidden)
                    first, offsets = base[id(node)]
                    row_idx.append(first + offsets[position])
        tok_idx = np.array(
            [t for p in plans for c in p.continuations for t in c.continuation_ids], dtype=np.int64
        )
        logprobs = self._target_logprobs(torch.cat(pieces) if pieces else None,
                                         np.array(row_idx, dtype=np.int64), tok_idx)
        out, k = [], 0
        for plan in plans:
            per_item = []
            for cont in plan.continuations:
                n = len(cont.continuation_ids)
                per_item.append(ContinuationLogprobs(cont.continuation_ids, logprobs[k:k + n], cont.boundary_merge))
                k += n
            out.append(per_item)
        return out

    def _target_logprobs(self, hidden, row_idx: np.ndarray, tok_idx: np.ndarray) -> np.ndarray:
        """log p(token | row) = logit - logsumexp(logits), the head run in slices to bound memory."""
        torch = self.torch
        result = np.zeros(len(row_idx), dtype=np.float64)
        if hidden is None:
            return result
        self.counter.head_rows += hidden.shape[0]
        lse = torch.cat([
            self._log_normaliser(hidden[start:start + self.head_chunk])
            for start in range(0, hidden.shape[0], self.head_chunk)
        ])
        r = torch.from_numpy(row_idx).to(self.device)
        t = torch.from_numpy(tok_idx).to(self.device)
        result[:] = (self._token_logits(hidden[r], t) - lse[r]).double().cpu().numpy()
        return result

    # -- generation -------------------------------------------------------------------------------

    def generate(self, prompts: list[str], max_new_tokens: int, batch_size: int = 8) -> list[GenerationResult]:
        encoded = [encode_ids(self.tokenizer, p, self.add_special_tokens) for p in prompts]
        for p, ids in zip(prompts, encoded):
            if not ids:
                raise CubeError(f"generation prompt {p!r} has no tokens (empty and no BOS token)")
        order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]), reverse=True)
        results: list[GenerationResult | None] = [None] * len(prompts)
        with self.torch.inference_mode(), tqdm(
            total=len(prompts), desc="generate", unit="item", disable=not self.progress
        ) as bar:
            for chunk in batches(order, batch_size):
                for i, ids in zip(chunk, self._greedy([encoded[i] for i in chunk], max_new_tokens)):
                    results[i] = GenerationResult(self.tokenizer.decode(list(ids)), ids, finish_reason(ids, max_new_tokens))
                bar.update(len(chunk))
        return results  # type: ignore[return-value]

    def _greedy(self, prompts: list[tuple[int, ...]], max_new_tokens: int) -> list[tuple[int, ...]]:
        """Greedy tokens per prompt, batched: the cache is appended to in place (``kv_cache``), and
        rows that have finished are dropped once they are a quarter of the batch, so a batch does
        not keep paying for its early finishers until its longest generation ends."""
        torch = self.torch
        ids, mask, positions = self._left_padded(prompts)
        hidden, cache = self._run_body(ids, mask, positions)
        preallocate(cache, max_new_tokens)
        next_pos = positions[:, -1:] + 1
        out: list[list[int]] = [[] for _ in prompts]
        rows = list(range(len(prompts)))  # the prompt in each cache row
        done = [False] * len(rows)
        for step in range(max_new_tokens):
            self.counter.head_rows += hidden.shape[0]
            tokens = self._logits(hidden[:, -1]).argmax(dim=-1).tolist()
            for r, tok in enumerate(tokens):
                if not done[r]:
                    if tok in self.eos_ids:
                        done[r] = True
                    else:
                        out[rows[r]].append(tok)
            if all(done) or step == max_new_tokens - 1:
                break
            if 4 * sum(done) >= len(rows):
                keep = [r for r, d in enumerate(done) if not d]
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                mask, next_pos = mask[index], next_pos[index]
                rows, tokens, done = [rows[r] for r in keep], [tokens[r] for r in keep], [False] * len(keep)
            feed = torch.tensor([[self.pad_id if d else t] for t, d in zip(tokens, done)], device=self.device)
            mask = torch.cat([mask, torch.ones_like(feed)], dim=1)
            hidden, cache = self._run_body(feed, mask, next_pos, cache)
            next_pos = next_pos + 1
        return [tuple(o) for o in out]


__all__ = ["HFBackend", "eos_token_ids"]
