"""The OCR engine: page rendering, backends (one interface, chosen by one registry) and its
HTTP service (``ocr_engine.service``, ``ocr-engine serve``).

It must not import Airflow: it deploys alone on GPU nodes.
"""
