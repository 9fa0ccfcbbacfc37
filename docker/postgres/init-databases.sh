#!/bin/bash
# PostgreSQL's first start (docker-entrypoint-initdb.d, run once on an empty data volume):
# the Airflow metadata database and the Rewind sink database, each owned by its own login role.
# Passwords come from the container's environment (docker-compose.yaml, from .env); none is in this file.
set -eo pipefail  # (no -u: the postgres entrypoint sources this file when it is not executable)
: "${AIRFLOW_DB_PASSWORD:?set AIRFLOW_DB_PASSWORD}"
: "${REWIND_SINK_DB_PASSWORD:?set REWIND_SINK_DB_PASSWORD}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v airflow_password="$AIRFLOW_DB_PASSWORD" -v sink_password="$REWIND_SINK_DB_PASSWORD" <<'EOSQL'
CREATE ROLE airflow LOGIN PASSWORD :'airflow_password';
CREATE DATABASE airflow OWNER airflow;
CREATE ROLE rewind_sink LOGIN PASSWORD :'sink_password';
CREATE DATABASE rewind_sink OWNER rewind_sink;
EOSQL
