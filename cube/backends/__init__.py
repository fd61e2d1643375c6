"""Scoring backends: one interface (``base.Backend``), a fast engine and the naive yardsticks.

Import the concrete backends from their modules (``cube.backends.hf``, ``cube.backends.reference``):
they need torch, which this package's own import does not.
"""

from cube.backends.base import (
    Backend, ContinuationLogprobs, ForwardCounter, GenerationResult, ScoreRequest,
)

__all__ = ["Backend", "ContinuationLogprobs", "ForwardCounter", "GenerationResult", "ScoreRequest"]
