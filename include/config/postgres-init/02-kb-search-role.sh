#!/usr/bin/env bash
# The search service reads the ledger (which version of a document is indexed, for its page
# images) with a role that may only read it: `kb_search`, SELECT on the tables of database
# `kb_ledger`, including tables the pipeline's `kb_ledger` role creates later.
#
# Run once by the postgres image on an empty volume, after 01-kb-ledger.sh (the database must
# exist). Re-running it by hand sets the password to the current KB_SEARCH_DB_PASSWORD:
#   docker compose exec postgres bash /docker-entrypoint-initdb.d/02-kb-search-role.sh
set -e

: "${KB_SEARCH_DB_PASSWORD:?KB_SEARCH_DB_PASSWORD must be set (see .env.example)}"

psql -v ON_ERROR_STOP=1 --no-psqlrc --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-postgres}" \
    --set=search_password="$KB_SEARCH_DB_PASSWORD" <<'SQL'
SELECT 'CREATE ROLE kb_search LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE'
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'kb_search')\gexec
ALTER ROLE kb_search WITH LOGIN PASSWORD :'search_password';
GRANT CONNECT ON DATABASE kb_ledger TO kb_search;
\connect kb_ledger
GRANT USAGE ON SCHEMA public TO kb_search;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO kb_search;
ALTER DEFAULT PRIVILEGES FOR ROLE kb_ledger IN SCHEMA public GRANT SELECT ON TABLES TO kb_search;
SQL
