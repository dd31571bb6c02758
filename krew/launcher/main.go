// Command launcher is the front of flux-plunger's single-file executable, the file Flux's
// own plugin manager installs (`flux plugin install plunger`, Flux >= 2.9; krew/flux_plugin.py
// builds it).  Flux's installer takes ONE file out of a release asset, and the plugin is a
// PyInstaller one-directory bundle (an executable plus _internal/): so the single file is
// this small static Go program (no cgo: it needs no libc at all) with the platform's krew
// archive embedded in it byte for byte (go:embed: in the executable's read-only data, which
// a Mach-O code signature covers, as bytes appended after the end would not be), and the
// version and the archive's sha256 set at link time.  It builds with Go 1.20 and newer, so
// that each platform's can be built with a Go whose floor is the archive's (release.yml:
// macOS 10.15 on Intel needs Go <= 1.22, macOS 11 on arm64 Go <= 1.24, Windows 8.1 Go 1.20;
// Linux: static, no libc).
//
// On its first run the launcher unpacks the archive once into a versioned directory of the
// user's cache (FLUX_PLUNGER_UNPACK_DIR, else os.UserCacheDir()/flux-plunger, else a hidden
// directory beside the executable), named VERSION-SHA16 (the archive's sha256), and then, on
// that run and every later one, replaces itself with the bundle's executable (execve; on
// Windows it runs it and passes its exit code on).  A later run costs one stat and the exec.
//
// Why not PyInstaller's own one-file mode: it unpacks the ~26 MiB bundle into a temporary
// directory on every run (2.9x the wall of the one-directory build, docs/BENCHMARKS.md) and
// cannot run at all where that directory is on a noexec mount (/tmp often is).
//
// The unpack is atomic: the archive is unpacked into a fresh temporary directory beside the
// final one, its sha256 checked, and the directory renamed into place.  Two first runs at
// once each unpack into their own temporary directory; one rename wins, the other finds the
// final directory complete and removes its own.  So the final directory exists only
// complete.  When it was damaged afterwards (its executable gone), it is moved aside and
// unpacked again.
package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// Bin is the bundle's executable (krew/binary.py's BIN).
	Bin = "kubectl-flux_plunger"
	// keep this many unpacked versions (the newest by modification time) in the cache
	keep = 3
	// an abandoned temporary unpack (a run killed half-way) is removed after this long
	staleAfter = time.Hour
)

// Set by krew/flux_plugin.py's build: bundle by a generated file that embeds the archive,
// version (vX.Y.Z) and sum (the archive's sha256, hex) by -ldflags -X.
var bundle, version, sum string

// answers: what the bundle's executable printed, at build time, for the few invocations
// kubectl_flux_plunger.entry answers from pre-rendered text (`--help`, `-h`, `--version`,
// `version --client`), by fastKey; set by a generated file (krew/flux_plugin.py runs the
// bundle to fill it).  Answering them here saves starting Python (~25 ms of CPU) on what
// people type most; anything else, or any doubt (another width, a completion request),
// runs the bundle.
var answers map[string]string

func main() {
	os.Exit(run())
}

func run() int {
	if bundle == "" || version == "" || len(sum) != 64 || strings.ContainsAny(version, `/\`) {
		return fail("this launcher was built without its bundle (krew/flux_plugin.py builds it)")
	}
	if text, ok := answers[fastKey(os.Args)]; ok {
		return answer(text)
	}
	root, err := unpackRoot()
	if err != nil {
		return fail("%v", err)
	}
	final := filepath.Join(root, version+"-"+sum[:16])
	target := filepath.Join(final, entryName(os.Args[0]))
	if _, err := os.Stat(target); err != nil {
		if err := unpack(root, final); err != nil {
			return fail("cannot unpack into %s: %v (FLUX_PLUNGER_UNPACK_DIR names another "+
				"directory)", root, err)
		}
	}
	return execute(target, os.Args)
}

// fastKey is the key of answers for this invocation, or "" when the bundle must run:
// "ARGS|PROG|WIDTH", PROG "flux plunger" or "kubectl flux-plunger" (entry.prog_name), WIDTH
// the help's width as entry.columns finds it (COLUMNS, else the terminal's, else 80),
// capped at 100 (entry.WIDE); "" for a completion request (entry.fast_answer).
func fastKey(argv []string) string {
	args := strings.Join(argv[1:], "\x00")
	switch args {
	case "--help", "-h", "--version", "version\x00--client":
	default:
		return ""
	}
	base := strings.TrimSuffix(filepath.Base(argv[0]), ".exe")
	if strings.HasPrefix(base, "kubectl_complete-") ||
		os.Getenv("_FLUX_PLUNGER_COMPLETE") != "" || os.Getenv("_KUBECTL_FLUX_PLUNGER_COMPLETE") != "" {
		return ""
	}
	prog := "kubectl flux-plunger"
	if strings.HasPrefix(base, "flux-") {
		prog = "flux plunger"
	}
	cols := 0
	if env := os.Getenv("COLUMNS"); env != "" {
		n, err := strconv.Atoi(env)
		if err != nil || env[0] == '+' {
			return "" // Python's int() reads forms Atoi does not: let it decide
		}
		cols = n
	}
	if cols <= 0 {
		cols = terminalColumns()
		if cols < 0 {
			return "" // a terminal whose width is not known here
		}
		if cols == 0 {
			cols = 80
		}
	}
	if cols > 100 {
		cols = 100
	}
	return strings.ReplaceAll(args, "\x00", " ") + "|" + prog + "|" + strconv.Itoa(cols)
}

// answer prints a pre-rendered answer as the bundle would: exit 0, or 1 when the reader has
// gone (`| head`), with no message.
func answer(text string) int {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE) // else a write to a closed fd 1 kills
	if _, err := os.Stdout.WriteString(text); err != nil {
		return 1
	}
	return 0
}

func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "error: flux-plunger: "+format+"\n", args...)
	return 1
}

// unpackRoot is where versions are unpacked: FLUX_PLUNGER_UNPACK_DIR, else the user's cache
// directory, else a hidden directory beside the executable (flux takes only names starting
// "flux-" for plugins), on a file system that can execute: the launcher runs from it.
func unpackRoot() (string, error) {
	if dir := os.Getenv("FLUX_PLUNGER_UNPACK_DIR"); dir != "" {
		return filepath.Abs(dir)
	}
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "flux-plunger"), nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("no cache directory (set HOME or FLUX_PLUNGER_UNPACK_DIR): %w", err)
	}
	return filepath.Join(filepath.Dir(self), ".flux-plunger.unpacked"), nil
}

// entryName is the name the bundle's executable is run by: the program tells from its
// argv[0] whether it is `flux plunger` (a name starting "flux-"), `kubectl flux-plunger`, or
// kubectl's completion helper; unpack makes a link by each name beside the executable.
func entryName(argv0 string) string {
	base := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	switch {
	case runtime.GOOS == "windows":
		return Bin + ".exe" // argv[0] is passed on unchanged (exec_windows.go)
	case strings.HasPrefix(base, "kubectl_complete-"):
		return "kubectl_complete-flux_plunger"
	case strings.HasPrefix(base, "kubectl-"):
		return Bin
	default:
		return "flux-plunger"
	}
}

func exeName() string {
	if runtime.GOOS == "windows" {
		return Bin + ".exe"
	}
	return Bin
}

// unpack unpacks the archive into final, atomically (see the package comment).
func unpack(root, final string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(final, exeName())); err != nil {
		if _, err := os.Stat(final); err == nil {
			// there, but damaged: move it aside (a rename is atomic), then unpack afresh
			aside, err := os.MkdirTemp(root, ".damaged-")
			if err != nil {
				return err
			}
			if err := os.Rename(final, filepath.Join(aside, "v")); err != nil &&
				!errors.Is(err, os.ErrNotExist) {
				return err
			}
			os.RemoveAll(aside)
		}
	}
	tmp, err := os.MkdirTemp(root, ".unpack-"+filepath.Base(final)+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // nothing is left there once renamed, or when another run won
	if err := extract(tmp); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp made it 0700
		return err
	}
	if runtime.GOOS != "windows" {
		for _, link := range []string{"flux-plunger", "kubectl_complete-flux_plunger"} {
			if err := os.Symlink(Bin, filepath.Join(tmp, link)); err != nil {
				return err
			}
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, statErr := os.Stat(filepath.Join(final, exeName())); statErr == nil {
			return nil // another first run renamed its own complete copy into place first
		}
		return err
	}
	prune(root, final)
	return nil
}

// extract writes the archive's directories and regular files under dir (nothing else is
// in a krew archive) after checking its sha256 against the one set at link time.
func extract(dir string) error {
	if got := sha256.Sum256([]byte(bundle)); hex.EncodeToString(got[:]) != sum {
		return fmt.Errorf("the embedded bundle's sha256 is %x, not %s: the executable is "+
			"damaged", got, sum)
	}
	gz, err := gzip.NewReader(strings.NewReader(bundle))
	if err != nil {
		return fmt.Errorf("the embedded bundle: %w", err)
	}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("the embedded bundle: %w", err)
		}
		if !filepath.IsLocal(hdr.Name) {
			return fmt.Errorf("the embedded bundle names %q, outside its directory", hdr.Name)
		}
		dest := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(dest, 0o755)
		case tar.TypeReg:
			err = writeFile(dest, tr, hdr.FileInfo().Mode().Perm())
		default:
			err = fmt.Errorf("the embedded bundle holds %q, neither a file nor a directory",
				hdr.Name)
		}
		if err != nil {
			return err
		}
	}
}

func writeFile(dest string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dest, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode|0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// prune removes the unpacked versions beyond the newest `keep` and abandoned temporary
// directories (a run killed half-way).
func prune(root, current string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	type dated struct {
		path string
		mod  time.Time
	}
	var versions []dated
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !e.IsDir() {
			continue
		}
		path := filepath.Join(root, e.Name())
		switch {
		case strings.HasPrefix(e.Name(), ".unpack-"), strings.HasPrefix(e.Name(), ".damaged-"):
			if time.Since(info.ModTime()) > staleAfter {
				os.RemoveAll(path)
			}
		case path != current && strings.HasPrefix(e.Name(), "v"):
			versions = append(versions, dated{path, info.ModTime()})
		}
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i].mod.After(versions[j].mod) })
	for i, v := range versions {
		if i >= keep-1 { // the current version is the first one kept
			os.RemoveAll(v.path)
		}
	}
}
