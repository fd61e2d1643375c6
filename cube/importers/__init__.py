"""Importers: other harnesses' runs as cube records.

A run's records come from cube's own harness (``cube.harness``) or from an importer here, at the
same level of the flow: both write the record format of ``cube.records`` and everything later
(rescore, confirm, explain) reads it without knowing which wrote it. Every importer follows one
contract (``cube.importers.contract``); ``cube.importers.registry`` lists them.
"""
