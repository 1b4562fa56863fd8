"""Airflow adapters for the knowledge-base pipeline: hooks own clients, tasks stay thin."""
