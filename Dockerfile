# The Airflow image for docker-compose.yaml: Airflow plus this project's packages.
FROM apache/airflow:3.3.2-python3.11
COPY --chown=airflow:root pyproject.toml README.md /opt/kb/
COPY --chown=airflow:root include /opt/kb/include
COPY --chown=airflow:root plugins /opt/kb/plugins
COPY --chown=airflow:root ocr_engine /opt/kb/ocr_engine
RUN pip install --no-cache-dir /opt/kb
COPY --chown=airflow:root dags /opt/airflow/dags
