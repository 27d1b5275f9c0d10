#!/usr/bin/env bash
# Runs the Temporal dev server (bin/temporal server start-dev) with what every clusterrun dev server shares,
# then the caller's flags: its SQLite database in write-ahead-log mode, synced at every commit. The default
# journal syncs the database three times per commit; a WAL syncs once, and keeps each commit as durable
# (design.md, "Backends"). up.sh, the end-to-end suite and the bench start their dev servers through this.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
exec "$root/bin/temporal" server start-dev --sqlite-pragma journal_mode=wal --sqlite-pragma synchronous=full "$@"
