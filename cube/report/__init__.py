"""``cube report``: the paper's method on a user's own stores, as an offline site.

The analysis (``analyse``) is computed once from the stores with the functions ``cube rescore``,
``cube confirm`` and ``cube explain`` use, written as ``report.json``; each page of the site is a
parameterised notebook that reads it back (``read_analysis``) and renders it; ``build_report``
executes the pages with papermill and builds them with Jupyter Book, as the paper's book is.
"""

from cube.report.analysis import analyse
from cube.report.model import ReportAnalysis, read_analysis

__all__ = ["ReportAnalysis", "analyse", "read_analysis"]
