"""Tokenizers from their published files (registry sources, GGUF headers, conversion) and the GPU-free audit of which label-scoring cells degenerate."""
