#!/usr/bin/env bash
# pg-primary, once, when the official postgres image initialises its empty data directory (run
# from /docker-entrypoint-initdb.d): the role the standby replicates as, its pg_hba line, and the
# physical replication slot the standby streams from (the primary keeps the WAL the standby has
# not received yet, also while the standby is down).
#
# The entrypoint may source this file instead of running it: no `exit`, no `set -u`.
set -e

replication_user="${REPLICATION_USER:-replicator}"
replication_slot="${REPLICATION_SLOT:-pg_standby}"
: "${REPLICATION_PASSWORD:?REPLICATION_PASSWORD must be set}"

# This temporary server already runs with synchronous_standby_names, and no standby exists yet:
# with the session's commits `local`, they do not wait for one.
PGOPTIONS="-c synchronous_commit=local" psql -v ON_ERROR_STOP=1 --no-psqlrc \
    --username "${POSTGRES_USER:-postgres}" --dbname postgres \
    --set user="$replication_user" --set password="$REPLICATION_PASSWORD" \
    --set slot="$replication_slot" <<'SQL'
CREATE ROLE :"user" WITH REPLICATION LOGIN PASSWORD :'password';
SELECT pg_create_physical_replication_slot(:'slot');
SQL

# `all` as a database does not match replication connections: they need their own line.
echo "host replication ${replication_user} all scram-sha-256" >> "$PGDATA/pg_hba.conf"
