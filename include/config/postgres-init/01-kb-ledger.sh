#!/usr/bin/env bash
# The pipeline's ledger gets its own role and database, apart from Airflow's metadata DB.
#
# The postgres image runs this once, from /docker-entrypoint-initdb.d, when it initialises an
# empty data volume (compose mounts this folder there). On a volume made before the ledger
# existed, run it by hand; it is idempotent, and re-running it also sets the role's password
# to the current KB_LEDGER_DB_PASSWORD (a rotation):
#   docker compose exec postgres bash /docker-entrypoint-initdb.d/01-kb-ledger.sh
#
# SQL init files cannot read the environment, hence a shell script; the password reaches
# psql as a variable and is quoted by psql (:'ledger_password'), never spliced into the SQL.
set -e

: "${KB_LEDGER_DB_PASSWORD:?KB_LEDGER_DB_PASSWORD must be set (see .env.example)}"

psql -v ON_ERROR_STOP=1 --no-psqlrc --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-postgres}" \
    --set=ledger_password="$KB_LEDGER_DB_PASSWORD" <<'SQL'
SELECT 'CREATE ROLE kb_ledger LOGIN'
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'kb_ledger')\gexec
ALTER ROLE kb_ledger WITH LOGIN PASSWORD :'ledger_password';
SELECT 'CREATE DATABASE kb_ledger OWNER kb_ledger'
 WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'kb_ledger')\gexec
REVOKE ALL ON DATABASE kb_ledger FROM PUBLIC;
GRANT ALL ON DATABASE kb_ledger TO kb_ledger;
SQL
