#!/bin/bash
# One-shot airflow-init: write the Simple auth manager's password file from AIRFLOW_ADMIN_PASSWORD,
# then migrate the metadata database. Every long-running Airflow service waits for it to succeed.
set -euo pipefail
: "${AIRFLOW_ADMIN_PASSWORD:?set AIRFLOW_ADMIN_PASSWORD in .env}"
passwords_file="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:?}"
umask 077
# JSON {"admin": "<password>"}: Airflow generates a password only for users missing from this file,
# so the operator's password from the environment is the one that logs in.
python - "$passwords_file" <<'PY'
import json, os, sys
path = sys.argv[1]
users = [u.split(":")[0] for u in os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"].split(",") if u]
with open(path, "w") as f:
    json.dump({users[0]: os.environ["AIRFLOW_ADMIN_PASSWORD"]}, f)
os.chmod(path, 0o600)
print(f"airflow-init: login for user {users[0]!r} written to {path}")
PY
airflow db migrate
airflow version
