//go:build tools

// Package tools pins what the temporal CLI of the dev environment and the end-to-end suite is built from
// (make tools): the released CLI, v1.5.1, with modernc.org/sqlite v1.44.3 in place of the v1.34.1 it names.
// With v1.34.1 a call cancelled while its query ran could interrupt the dev server's SQLite connection for
// good: every later operation failed with "interrupted (9)" and the server answered nothing
// (tests/devserver_test.go; Temporal took the same version for the same errors, temporalio/temporal#9198).
//
// The PostgreSQL backend's Temporal server, its SQL schema tool and the Web UI server (make postgres-tools) are
// built from here too: the versions the CLI embeds (server v1.29.1, Web UI v2.42.1), with the same dependencies,
// so their build reuses what the CLI's compiled.
package tools

import (
	_ "github.com/temporalio/cli/cmd/temporal"
	_ "github.com/temporalio/ui-server/v2/cmd/server"
	_ "go.temporal.io/server/cmd/server"
	_ "go.temporal.io/server/cmd/tools/sql"
)
