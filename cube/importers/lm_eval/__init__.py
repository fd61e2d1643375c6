"""Importing lm-evaluation-harness runs: their multiple-choice log-likelihoods as cube records.

Researchers already hold lm-eval runs of C-Eval and CMMLU. Imported, such a run is rescored,
confirmed and compared like cube's own records (no model needed), and its protocol is audited
from the tokenizer alone: did the labels it scored share a first token, did options tie, did its
tokenization of the label differ from cube's?

What is read: the folder ``lm_eval --log_samples --output_path`` wrote: ``results_<ts>.json`` (each
task's configuration, the model args, the tokenizer's special tokens) and, beside it,
``samples_<task>_<ts>.jsonl`` (one line per doc: the doc, the rendered prompts, the per-choice
log-likelihoods, acc and acc_norm). The doc and the prompts are benchmark text: they are read in
memory only, to match each doc to its item by question hash (``cube.protocol.items.qhash``) and to
tokenize what lm-eval scored, and are never written. Records keep uid + qhash and numbers; the
manifest keeps the task configuration as logged (templates, delimiters, fewshot settings),
checked against the benchmark's text before anything is written.

One module per step of an import, in the order it runs them:

- ``reading``: the output folder, its files checked for what an import needs;
- ``protocol``: the protocol each task scored under, from its logged configuration;
- ``audit``: lm-eval's tokenization of a label, and the audit of a task's cell under it;
- ``matching``: each doc to its benchmark item;
- ``records``: each task's decisions and the manifest's metadata of the whole import;
- ``report``: the "check my run" report of an import;
- ``importer``: the :class:`cube.importers.contract.HarnessImporter` that ``cube import lm-eval``
  and ``cube explain`` call (``cube.importers.registry`` lists it);
- ``local_task``: the other direction, a local lm-eval task over cube's items, to run lm-eval on
  exactly the prompts cube scores.
"""
