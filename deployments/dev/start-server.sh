#!/usr/bin/env bash
# Runs the Temporal dev server (bin/temporal server start-dev) with what every clusterrun dev server shares,
# then the caller's flags: its SQLite database in write-ahead-log mode, synced at every commit. The default
# journal syncs the database three times per commit; a WAL syncs once, and keeps each commit as durable
# (design.md, "Backends"). up.sh, the end-to-end suite and the bench start their dev servers through this.
#
# start-dev makes the server refresh its search attribute cache at every read, which reads the cluster
# metadata from the database each time a history is read or a search attribute set. With SQL visibility the
# cache holds only the fixed columns (a custom search attribute is a namespace's alias of one), so it is left
# to refresh on its own schedule, as on a production server.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
exec "$root/bin/temporal" server start-dev --sqlite-pragma journal_mode=wal --sqlite-pragma synchronous=full \
	--dynamic-config-value system.forceSearchAttributesCacheRefreshOnRead=false "$@"
