"""Scoring models: the runner, the scorers, answer extraction, model loading, dtype choice and the backends."""
