"""Observability: the pipeline exporter, dashboards as code, and their renderers."""
