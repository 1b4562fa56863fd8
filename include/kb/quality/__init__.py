"""Data-quality gates: Great Expectations suites over a document's pages and chunks.

``measures`` turns pages and chunks into one DataFrame row each, ``suites`` says what
those rows must satisfy (thresholds from ``QualitySettings``), ``gate`` runs a suite
through a GX Checkpoint and returns a ``GateReport``, ``alerts`` writes the message the
ops team receives when a document fails.
"""

import logging

# While it is imported, GX logs some 200 INFO lines about its own API docs ("Skipping
# registering function ..."), which were most of every index task's log.
logging.getLogger("great_expectations._docs_decorators").setLevel(logging.WARNING)
