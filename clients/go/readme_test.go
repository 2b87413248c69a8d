package lockbroker_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestReadmeProgramsRun builds every ```go block of README.md that is a
// whole program (package main) against this module, and runs each against
// the broker of LOCKBROKER_URL: the README's examples work as written.
func TestReadmeProgramsRun(t *testing.T) {
	need(t, "LOCKBROKER_URL")
	readme, err := os.ReadFile("README.md")
	must(t, err, "README.md")
	programs := goPrograms(string(readme))
	if len(programs) < 4 {
		t.Fatalf("the README shows whole programs: found %d", len(programs))
	}
	here, err := os.Getwd()
	must(t, err, "getwd")
	dir := t.TempDir()
	goMod := fmt.Sprintf("module readme\n\ngo 1.19\n\nrequire lockbroker.dev/lockbroker v0.0.0\n\nreplace lockbroker.dev/lockbroker => %s\n", here)
	must(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644), "go.mod")
	for i, program := range programs {
		sub := filepath.Join(dir, fmt.Sprintf("program%d", i+1))
		must(t, os.Mkdir(sub, 0o755), "mkdir")
		must(t, os.WriteFile(filepath.Join(sub, "main.go"), []byte(program), 0o644), "main.go")
	}
	bin := filepath.Join(dir, "bin")
	must(t, os.Mkdir(bin, 0o755), "mkdir")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, goTool(), "build", "-o", bin, "./...")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the README's programs build: %v\n%s", err, out)
	}
	for i := range programs {
		name := fmt.Sprintf("program%d", i+1)
		run := exec.CommandContext(ctx, filepath.Join(bin, name))
		out, err := run.CombinedOutput()
		if err != nil {
			t.Fatalf("README program %d runs: %v\n%s\n%s", i+1, err, out, programs[i])
		}
		t.Logf("README program %d:\n%s", i+1, out)
	}
}

// goPrograms is the ```go blocks of a Markdown text that are programs.
func goPrograms(markdown string) []string {
	var programs []string
	blocks := strings.Split(markdown, "```go\n")
	for _, block := range blocks[1:] {
		code := block[:strings.Index(block, "```")]
		if strings.HasPrefix(code, "package main\n") {
			programs = append(programs, code)
		}
	}
	return programs
}

// goTool is the go command of the toolchain running the tests.
func goTool() string {
	if tool := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(tool) {
		return tool
	}
	return "go"
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
