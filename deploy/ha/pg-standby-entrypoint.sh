#!/usr/bin/env bash
# pg-standby's entrypoint. At its first start (an empty data directory) the directory becomes a
# copy of pg-primary's, taken with `pg_basebackup -R`: WAL streamed during the copy, from
# pg-primary's replication slot, and standby.signal plus primary_conninfo (with the slot)
# written, so the server starts as a hot standby streaming from pg-primary. application_name
# names this standby in pg-primary's synchronous_standby_names.
#
# Then the official image's entrypoint runs the server as always (it initialises nothing: the
# data directory is not empty).
set -Eeuo pipefail

PGDATA="${PGDATA:-/var/lib/postgresql/data}"
primary_host="${PRIMARY_HOST:-pg-primary}"
replication_user="${REPLICATION_USER:-replicator}"
replication_slot="${REPLICATION_SLOT:-pg_standby}"
: "${REPLICATION_PASSWORD:?REPLICATION_PASSWORD must be set}"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    mkdir -p "$PGDATA"
    chown postgres:postgres "$PGDATA"
    chmod 700 "$PGDATA"
    # Over TCP: pg-primary's initialisation runs a server on its Unix socket only.
    until pg_isready --quiet --host "$primary_host" --username "$replication_user" \
            --dbname postgres; do
        echo "pg-standby: waiting for $primary_host to accept connections" >&2
        sleep 1
    done
    PGPASSWORD="$REPLICATION_PASSWORD" gosu postgres pg_basebackup \
        --pgdata "$PGDATA" --write-recovery-conf --wal-method stream --checkpoint fast \
        --slot "$replication_slot" \
        --dbname "host=$primary_host user=$replication_user application_name=$replication_slot"
fi

exec docker-entrypoint.sh "$@"
