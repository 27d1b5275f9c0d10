package tests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tests/e2e.sh runs the suite as two processes, and tells a parallel test from a serial one by its source: the
// line after `func TestX(t *testing.T) {` is `t.Parallel()`. A test made parallel another way (by a helper it
// calls, after another statement or a comment) would run in the serial part, after every serial test, and
// lengthen the suite unseen: this keeps the rule.
func TestSuite_ParallelTestsSayItFirst(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	var funcs []*ast.FuncDecl
	for _, name := range files {
		file, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, decl := range file.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Body != nil && fn.Recv == nil {
				funcs = append(funcs, fn)
			}
		}
	}
	// Helpers that make their caller parallel: fine as a subtest's body (t.Run(name, helper)), not called by a test.
	makesParallel := map[string]bool{}
	for _, fn := range funcs {
		for _, stmt := range fn.Body.List {
			if called(stmt) == "Parallel" {
				makesParallel[fn.Name.Name] = true
			}
		}
	}
	parallels := 0
	for _, fn := range funcs {
		if !strings.HasPrefix(fn.Name.Name, "Test") {
			continue
		}
		for i, stmt := range fn.Body.List {
			where := fset.Position(stmt.Pos())
			switch name := called(stmt); {
			case name == "Parallel":
				assert.True(t, i == 0 && where.Line == fset.Position(fn.Body.Lbrace).Line+1,
					"%s: t.Parallel() goes on the line after `func %s(t *testing.T) {`, before anything else: tests/e2e.sh reads it there", where, fn.Name.Name)
				parallels++
			case makesParallel[name]:
				assert.Fail(t, "a helper makes a test parallel", "%s: %s calls %s, which calls t.Parallel(): call t.Parallel() on the line after `func %[2]s(t *testing.T) {` instead, where tests/e2e.sh reads it", where, fn.Name.Name, name)
			}
		}
	}
	assert.Greater(t, parallels, 50, "the parallel tests were not found")
}

// called names the function a statement calls (the method's name for t.Parallel()), or "".
func called(stmt ast.Stmt) string {
	expr, ok := stmt.(*ast.ExprStmt)
	if !ok {
		return ""
	}
	call, ok := expr.X.(*ast.CallExpr)
	if !ok {
		return ""
	}
	switch fun := call.Fun.(type) {
	case *ast.Ident:
		return fun.Name
	case *ast.SelectorExpr:
		if fun.Sel.Name == "Parallel" && len(call.Args) == 0 {
			return "Parallel"
		}
	}
	return ""
}
