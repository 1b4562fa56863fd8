"""The knowledge-base pipeline's own library: plain Python, no Airflow imports.

Airflow adapters live in ``plugins/kb_airflow``; the OCR engine lives in ``ocr_engine``.
"""
