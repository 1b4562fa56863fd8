#!/usr/bin/env bash
# Airflow's metadata database gets a role of its own that owns it and nothing else, so no
# Airflow container holds the superuser's password (POSTGRES_PASSWORD stays in the postgres
# container; nothing connects with it).
#
# The postgres image runs this once, from /docker-entrypoint-initdb.d, when it initialises an
# empty data volume (compose mounts this folder there), before 01-kb-ledger.sh and
# 02-kb-search-role.sh. Re-running it by hand sets the role's password to the current
# AIRFLOW_DB_PASSWORD (a rotation):
#   docker compose exec postgres bash /docker-entrypoint-initdb.d/00-airflow-db.sh
# A volume made before the roles were split has `airflow` as its bootstrap superuser, which
# Postgres cannot demote: this script then stops with an error (docs/DEPLOY.md, "Postgres
# roles", says how to move such a volume).
#
# The password reaches psql as a variable and is quoted by psql (:'airflow_password'), never
# spliced into the SQL.
set -e

: "${AIRFLOW_DB_PASSWORD:?AIRFLOW_DB_PASSWORD must be set (see .env.example)}"

psql -v ON_ERROR_STOP=1 --no-psqlrc --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-postgres}" \
    --set=airflow_password="$AIRFLOW_DB_PASSWORD" <<'SQL'
SELECT 'CREATE ROLE airflow LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE'
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'airflow')\gexec
DO $$
BEGIN
  IF (SELECT rolsuper FROM pg_roles WHERE rolname = 'airflow') THEN
    RAISE EXCEPTION 'the airflow role is a superuser (a volume from before the roles were split): see docs/DEPLOY.md, "Postgres roles"';
  END IF;
END $$;
ALTER ROLE airflow WITH LOGIN PASSWORD :'airflow_password';
SELECT 'CREATE DATABASE airflow OWNER airflow'
 WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'airflow')\gexec
REVOKE ALL ON DATABASE airflow FROM PUBLIC;
GRANT ALL ON DATABASE airflow TO airflow;
SQL
