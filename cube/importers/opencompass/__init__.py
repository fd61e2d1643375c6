"""Importing OpenCompass runs of CMMLU and C-Eval: PPL choices and generations as cube records.

OpenCompass is the harness Chinese-benchmark users run most, and its two multiple-choice modes
score differently from lm-eval and from cube: imported, a run's items can be rescored, compared
and explained beside cube's own records, with no model.

What is read: one OpenCompass output folder (``opencompass CONFIG -w WORK_DIR`` writes
``WORK_DIR/<timestamp>/``; give either): ``configs/*.py`` (the whole run's configuration, as
mmengine dumps it: read as a syntax tree, never executed), ``predictions/<model>/<dataset>.json``
and ``results/<model>/<dataset>.json``. Predictions hold the rendered prompts (benchmark text): they
are read in memory only, to match each prediction to its item by question hash and to tokenize
what was scored, and are never written. Records keep uid + qhash and numbers.

One module per step of an import, in the order it runs them:

- ``config``: the dumped configuration, as a syntax tree;
- ``reading``: the output folder, each dataset's configuration, predictions and accuracy checked
  for what an import needs;
- ``matching``: each prediction to its benchmark item, and the prompt checked against it;
- ``audit``: cube's audit of OpenCompass's answer context on the run's tokenizer;
- ``records``: each dataset's decisions (PPL and gen modes) and the manifest's metadata;
- ``report``: the "check my run" report of an import;
- ``importer``: the :class:`cube.importers.contract.HarnessImporter` that ``cube import
  opencompass`` and ``cube explain`` call (``cube.importers.registry`` lists it);
- ``cmmlu_configs``: the other direction, OpenCompass's own CMMLU configs narrowed to chosen rows
  and its prompts rendered by cube, to score exactly the same bytes in both harnesses.
"""
