"""The release: the scrubbed record bundle with its checksums, built and verified (the leakage rules it applies live in ``cube.records.leakage``)."""
