// Package docs holds no code: its test checks that the repository explains itself. A clone
// alone must be enough to understand the code, so every document a file cites is one of the
// repository's, and every section it names exists.
package docs

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's root, seen from this package's directory.
const root = ".."

// outside are the ways a file has cited documents that are not in the repository: the
// reference folder that lived beside it, its design contract and Pi format notes by name,
// their numbered sections, and the Pi runner that folder held. What the code relies on is in docs/architecture.md and
// docs/pi-format.md instead, cited by section name. (The words are split so that this file
// does not match itself.)
var outside = []struct {
	re   *regexp.Regexp
	what string
}{
	{regexp.MustCompile(`\.\./` + `shared\b|\bshared/` + `spec\b|/work/` + `shared\b`), "a path outside the repository"},
	{regexp.MustCompile(`\bdesign ` + `§|\bdesign\.` + `md\b`), "the design contract outside the repository"},
	{regexp.MustCompile(`pi-session-` + `format|pi-1\.6-` + `changes`), "Pi format notes outside the repository"},
	{regexp.MustCompile(`§` + ` ?[0-9]`), "a numbered section of a document outside the repository"},
	{regexp.MustCompile(`\bpi-` + `oracle\b`), "a tool outside the repository (the real Pi is run through interop/pi/pi)"},
}

// skipDirs are never read: version control, dependencies, build output, scratch space.
var skipDirs = map[string]bool{".git": true, "node_modules": true, "bin": true, ".compactor": true}

// dataExt are files that are data, not text a person writes (sessions, goldens, reports);
// Pi's own words inside them are not citations.
var dataExt = map[string]bool{
	".jsonl": true, ".json": true, ".gz": true, ".html": true, ".txt": true, ".png": true,
	".svg": true, ".sum": true, ".lock": true, ".tiktoken": true,
}

// repoFiles returns the repository's text files (relative, slash-separated) and their bytes.
func repoFiles(t *testing.T) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || dataExt[strings.ToLower(filepath.Ext(p))] {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.IndexByte(b, 0) >= 0 {
			return nil // binary
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		t.Fatalf("walk the repository: %v", err)
	}
	if len(files) < 100 || files["go.mod"] == nil {
		t.Fatalf("read %d files from %s, go.mod among them: %v; is this the repository's docs/?", len(files), root, files["go.mod"] != nil)
	}
	return files
}

// TestNoCitationOutsideRepository fails for every line of code, comment, script, Makefile or
// doc that cites a document outside the repository.
func TestNoCitationOutsideRepository(t *testing.T) {
	var found []string
	for name, b := range repoFiles(t) {
		for i, line := range strings.Split(string(b), "\n") {
			if !strings.ContainsAny(line, "§/") && !strings.Contains(line, "pi-") && !strings.Contains(line, "design") {
				continue // none of the patterns can match: saves most of the regexp work
			}
			for _, o := range outside {
				if m := o.re.FindString(line); m != "" {
					found = append(found, fmt.Sprintf("%s:%d: %s (%q): %s", name, i+1, o.what, m, strings.TrimSpace(line)))
					break
				}
			}
		}
	}
	if len(found) > 0 {
		slices.Sort(found)
		t.Errorf("%d lines cite a document outside the repository; cite docs/architecture.md or docs/pi-format.md by section name, or explain in place:\n%s", len(found), strings.Join(found, "\n"))
	}
}

// A citation of a section of one of the repository's documents, as the code and the docs
// write it: the document's path, a comma (or none) and the section's name in double quotes
// (further names joined by "and"), as in docs/live-agents.md, "The rules";
// or a Markdown link `[text](path.md#anchor)`.
var (
	sectionCite = regexp.MustCompile(`\b((?:[a-z0-9_.-]+/)*[A-Za-z0-9_-]+\.md),? "([^"]+)"((?: and "[^"]+")*)`)
	andName     = regexp.MustCompile(`"([^"]+)"`)
	mdLink      = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading     = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
)

// TestCitedSectionsExist fails for a citation of a document of the repository that does not
// exist, or of a section it does not have, and for a Markdown link that leaves the
// repository or leads to no file.
func TestCitedSectionsExist(t *testing.T) {
	files := repoFiles(t)
	var bad []string
	for name, b := range files {
		for i, line := range strings.Split(string(b), "\n") {
			if !strings.Contains(line, ".md") && !strings.Contains(line, "](") {
				continue // neither a citation of a Markdown file nor a link
			}
			at := fmt.Sprintf("%s:%d", name, i+1)
			for _, m := range sectionCite.FindAllStringSubmatch(line, -1) {
				doc := resolve(name, m[1])
				if doc == "" {
					continue // a Markdown file of another project (Pi's docs), named as such
				}
				names := []string{m[2]}
				for _, n := range andName.FindAllStringSubmatch(m[3], -1) {
					names = append(names, n[1])
				}
				text, ok := files[doc]
				if !ok {
					bad = append(bad, fmt.Sprintf("%s: %s does not exist", at, m[1]))
					continue
				}
				for _, n := range names {
					if !hasSection(text, n) {
						bad = append(bad, fmt.Sprintf("%s: %s has no section %q", at, doc, n))
					}
				}
			}
			if !strings.HasSuffix(name, ".md") {
				continue
			}
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				doc := name
				if path != "" {
					doc = filepath.ToSlash(filepath.Join(filepath.Dir(name), path))
					if doc == ".." || strings.HasPrefix(doc, "../") {
						bad = append(bad, fmt.Sprintf("%s: link %s leaves the repository", at, target))
						continue
					}
					if _, ok := files[doc]; !ok && !exists(doc) {
						bad = append(bad, fmt.Sprintf("%s: link %s leads to no file", at, target))
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(doc, ".md") && !hasAnchor(files[doc], anchor) {
					bad = append(bad, fmt.Sprintf("%s: %s has no section #%s", at, doc, anchor))
				}
			}
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		t.Errorf("%d citations lead nowhere:\n%s", len(bad), strings.Join(bad, "\n"))
	}
}

// resolve returns the repository path of a document cited in file from, or "" when the
// citation names a document of another project (Pi's docs/compaction.md, say): a path is the
// repository's when it starts with docs/ or exists; a bare name, when it stands beside from
// or in docs/.
func resolve(from, cited string) string {
	if strings.Contains(cited, "/") {
		if strings.HasPrefix(cited, "docs/") || exists(cited) {
			return cited
		}
		return ""
	}
	for _, p := range []string{filepath.ToSlash(filepath.Join(filepath.Dir(from), cited)), "docs/" + cited} {
		if exists(p) {
			return p
		}
	}
	return ""
}

func exists(rel string) bool {
	_, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
	return err == nil
}

// hasSection reports whether a Markdown text has a heading that is name, or starts with it
// followed by a space, a colon, a comma or a parenthesis ("Shutdown" names "Shutdown: a
// restart that finishes its work").
func hasSection(text []byte, name string) bool {
	for _, m := range heading.FindAllSubmatch(text, -1) {
		h := strings.Trim(string(m[1]), "`")
		if strings.EqualFold(h, name) {
			return true
		}
		if len(h) > len(name) && strings.EqualFold(h[:len(name)], name) && strings.ContainsRune(" :,(", rune(h[len(name)])) {
			return true
		}
	}
	return false
}

// hasAnchor reports whether a Markdown text has a heading whose GitHub anchor is anchor.
func hasAnchor(text []byte, anchor string) bool {
	for _, m := range heading.FindAllSubmatch(text, -1) {
		if slug(string(m[1])) == anchor {
			return true
		}
	}
	return false
}

// slug is the anchor GitHub gives a heading: lower case, spaces to hyphens, every character
// but letters, digits, hyphens and underscores dropped.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
