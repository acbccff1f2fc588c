package rls

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// MaxConfigFiles bounds the files of a configuration directory.
const MaxConfigFiles = 1024

// Load reads a configuration from path: one file (see [ParseConfig]), or
// a directory whose *.yaml and *.yml files, in its subdirectories too,
// are read in the order of their paths as one configuration, as
// envoyproxy/ratelimit reads its runtime directory (names starting with
// '.' are skipped). A domain defined in two files is refused unless the
// settings document sets merge_domains (MERGE_DOMAIN_CONFIG), which
// merges their descriptors. Together the files hold at most
// MaxConfigBytes; errors name the file within the directory.
func Load(path string) ([]DomainConfig, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("rls: %w", err)
	}
	if !fi.IsDir() {
		data, err := readBounded(path, MaxConfigBytes)
		if err != nil {
			return nil, err
		}
		return ParseConfig(data)
	}
	var names []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != path && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || !d.Type().IsRegular() && d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		if ext := filepath.Ext(p); ext != ".yaml" && ext != ".yml" {
			return nil
		}
		if len(names) == MaxConfigFiles {
			return fmt.Errorf("more than %d configuration files in %s", MaxConfigFiles, path)
		}
		names = append(names, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("rls: %w", err)
	}
	sort.Strings(names)
	var files []file
	left := int64(MaxConfigBytes)
	for _, p := range names {
		data, err := readBounded(p, left)
		if err != nil {
			return nil, err
		}
		left -= int64(len(data))
		rel, _ := filepath.Rel(path, p)
		files = append(files, file{name: filepath.ToSlash(rel), data: data})
	}
	return parseFiles(files)
}

// readBounded reads at most limit bytes of path.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("rls: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("rls: %w", err)
	}
	if int64(len(data)) > limit {
		return nil, &ConfigError{File: filepath.Base(path), Msg: fmt.Sprintf("configuration larger than %d bytes", MaxConfigBytes)}
	}
	return data, nil
}
