"""Data-quality gates: Great Expectations suites over a document's pages and chunks.

``measures`` turns pages and chunks into one DataFrame row each, ``suites`` says what
those rows must satisfy (thresholds from ``QualitySettings``), ``gate`` runs a suite
through a GX Checkpoint and returns a ``GateReport``, ``alerts`` writes the message the
ops team receives when a document fails.
"""
