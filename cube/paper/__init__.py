"""From numbers to the book: figures, charts, the notebook executor and book build, the smoke test and the paper's claims table."""
