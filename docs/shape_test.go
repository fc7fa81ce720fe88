package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The sizes a reader can hold in mind. A package is read as a whole to learn what it does,
// a file in one sitting, a function on one screen: past these limits the code is split by
// meaning (a package per job, a helper per step), not cut at the line. Test code is not
// held to them (a table of cases reads top to bottom), nor is generated code.
const (
	maxPackageLines  = 4000 // non-test Go lines of one package (one directory)
	maxFileLines     = 500  // lines of one non-test Go file
	maxFunctionLines = 80   // a function from its first line to its closing brace, literals included
)

// shapeExceptions are the functions, files and packages allowed past a limit, each with why
// splitting it would make the code harder to read. A key is "path" for a file or package
// (a directory) and "path:Name" for a function ("path:func literal@LINE" is never used: a
// literal that long is split). The test fails for an exception that is no longer needed, so
// the list shrinks with the code.
var shapeExceptions = map[string]string{
	// One flat switch over the JSON keys of a message, each case setting its own field, in the
	// hottest decode loop of a session read: split, it reads worse (the cases are one
	// decision) and calls a function per member.
	"sessionio/message.go:decodeMessageInto": "a flat switch over a message's keys, the hot decode loop",
}

// TestShapeLimits holds every non-test Go package, file and function to the limits above.
func TestShapeLimits(t *testing.T) {
	var over []string
	used := map[string]bool{}
	check := func(key string, n, limit int, what string) {
		if n <= limit {
			return
		}
		if _, ok := shapeExceptions[key]; ok {
			used[key] = true
			return
		}
		over = append(over, fmt.Sprintf("%s: %d lines, over the %s limit of %d", key, n, what, limit))
	}
	packages := map[string]int{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDirs[d.Name()] || d.Name() == "testdata" || (strings.HasPrefix(d.Name(), ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		lines := strings.Count(string(src), "\n")
		packages[filepath.ToSlash(filepath.Dir(rel))] += lines
		check(rel, lines, maxFileLines, "file")
		for _, fn := range functionLengths(fset, f) {
			check(rel+":"+fn.name, fn.lines, maxFunctionLines, "function")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, n := range packages {
		check(dir, n, maxPackageLines, "package")
	}
	slices.Sort(over)
	for _, o := range over {
		t.Error(o)
	}
	for key := range shapeExceptions {
		if !used[key] {
			t.Errorf("shapeExceptions[%q]: within its limit now, or gone; remove the exception", key)
		}
	}
}

type functionLength struct {
	name  string
	lines int
}

// functionLengths lists every function and function literal of f with its length in lines.
// A method is named Type.Method; a literal "func literal@LINE" in the function that holds it.
func functionLengths(fset *token.FileSet, f *ast.File) []functionLength {
	var out []functionLength
	span := func(from token.Pos, body *ast.BlockStmt) int {
		return fset.Position(body.Rbrace).Line - fset.Position(from).Line + 1
	}
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		name := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) == 1 {
			name = receiverName(fd.Recv.List[0].Type) + "." + name
		}
		out = append(out, functionLength{name, span(fd.Pos(), fd.Body)})
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			if lit, ok := n.(*ast.FuncLit); ok {
				out = append(out, functionLength{fmt.Sprintf("%s/func literal@%d", name, fset.Position(lit.Pos()).Line), span(lit.Pos(), lit.Body)})
			}
			return true
		})
	}
	return out
}

func receiverName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiverName(x.X)
	case *ast.IndexExpr:
		return receiverName(x.X)
	case *ast.IndexListExpr:
		return receiverName(x.X)
	case *ast.Ident:
		return x.Name
	}
	return "?"
}

// TestShapeCounts the checker itself: a function of 81 lines is over, one of 80 is not, and
// a literal is measured apart from the function that holds it.
func TestShapeCounts(t *testing.T) {
	body := func(n int) string { return strings.Repeat("\t_ = 0\n", n) }
	src := "package p\n\nfunc (t *T[K]) long() {\n" + body(79) + "}\n\nfunc ok() {\n" + body(78) + "}\n\nfunc outer() {\n\tf := func() {\n" + body(81) + "\t}\n\t_ = f\n}\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, fn := range functionLengths(fset, f) {
		got[fn.name] = fn.lines
	}
	want := map[string]int{"T.long": 81, "ok": 80, "outer": 86, "outer/func literal@167": 83} // outer starts at line 166
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s: %d lines, want %d (all: %v)", name, got[name], n, got)
		}
	}
}
