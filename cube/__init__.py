"""cube: trustworthy multiple-choice LLM evaluation.

The package is a set of flat, one-concern modules. Data flows one way:
config -> prompts -> backend -> records -> rescoring -> statistics -> notebooks -> book.
"""

__version__ = "0.1.0"
