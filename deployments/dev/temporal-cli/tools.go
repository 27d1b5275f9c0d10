//go:build tools

// Package tools pins what the temporal CLI of the dev environment and the end-to-end suite is built from
// (make tools): the released CLI, v1.5.1, with modernc.org/sqlite v1.44.3 in place of the v1.34.1 it names.
// With v1.34.1 a call cancelled while its query ran could interrupt the dev server's SQLite connection for
// good: every later operation failed with "interrupted (9)" and the server answered nothing
// (tests/devserver_test.go; Temporal took the same version for the same errors, temporalio/temporal#9198).
package tools

import _ "github.com/temporalio/cli/cmd/temporal"
