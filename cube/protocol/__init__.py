"""What a prompt is: benchmark items and their subject taxonomy, label sets, prompt templates, tokenization of a prompt and its continuation, and the benchmark data install."""
