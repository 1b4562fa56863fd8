"""The OCR engine: page rendering, backends and (later) its HTTP service.

It must not import Airflow: it deploys alone on GPU nodes.
"""
