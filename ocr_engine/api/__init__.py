"""The engine's one public face: what crosses between the OCR engine and whoever calls it
(the OCR service's clients, the pipeline), and the helpers both sides use.

- ``pages``: the typed page result (``PageResult``, ``PageStatus``), written and read back;
- ``names``: the route ``auto`` and the backends' names;
- ``contract``: the OCR service's wire contract (published limits, every refusal code);
  ``limits`` and ``errors``: the engine's limits and typed errors it is made of;
- ``pdf``, ``structure``, ``tables``, ``text``, ``cost``: opening and slicing PDFs, tables as
  Markdown, text measures, and what an OCR page costs;
- ``http``, ``http_errors``: what both HTTP services do around requests.

The bottom floor: nothing here imports the rest of ``ocr_engine`` (``tests/test_layering.py``).
"""
