package quota

import (
	"fmt"
	"time"
)

// Operation configures the budget of one named operation.
type Operation struct {
	// Name identifies the operation in [Request.Operation]. It follows the
	// identifier rules of [Validate].
	Name string
	// Limit is how many distinct receipts one bucket admits per window, in
	// [1, MaxLimit]. There is no default: every operation states its limit.
	Limit int
	// Window is the fixed window length, in [MinWindow, MaxWindow]; zero
	// means DefaultWindow. It must be a whole number of milliseconds.
	Window time.Duration
	// MaxReplays bounds how often one counted receipt may be replayed
	// (the same receipt id with the same fingerprint) within its window,
	// in [1, MaxMaxReplays]; zero means DefaultMaxReplays. The lower bound
	// is 1 because a lost response must be recoverable by one replay.
	MaxReplays int
}

// WithDefaults returns o with a zero Window replaced by DefaultWindow and a
// zero MaxReplays by DefaultMaxReplays.
func (o Operation) WithDefaults() Operation {
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.MaxReplays == 0 {
		o.MaxReplays = DefaultMaxReplays
	}
	return o
}

// Validate checks o after defaults are applied. The error names the
// setting and its allowed range and matches [ErrConfig].
func (o Operation) Validate() error {
	o = o.WithDefaults()
	if reason := checkID(o.Name, MaxIDBytes); reason != "" {
		return &ConfigError{Setting: "operation name", Reason: reason}
	}
	if o.Limit < 1 || o.Limit > MaxLimit {
		return &ConfigError{Setting: "operation " + o.Name + " limit",
			Reason: fmt.Sprintf("%d out of range [1, %d]", o.Limit, MaxLimit)}
	}
	if o.Window < MinWindow || o.Window > MaxWindow {
		return &ConfigError{Setting: "operation " + o.Name + " window",
			Reason: fmt.Sprintf("%s out of range [%s, %s]", o.Window, MinWindow, MaxWindow)}
	}
	if o.Window%time.Millisecond != 0 {
		return &ConfigError{Setting: "operation " + o.Name + " window",
			Reason: fmt.Sprintf("%s is not a whole number of milliseconds", o.Window)}
	}
	if o.MaxReplays < 1 || o.MaxReplays > MaxMaxReplays {
		return &ConfigError{Setting: "operation " + o.Name + " max replays",
			Reason: fmt.Sprintf("%d out of range [1, %d]", o.MaxReplays, MaxMaxReplays)}
	}
	return nil
}

// Operations is an immutable, validated set of operations. The zero value
// holds none. It is safe for concurrent use.
type Operations struct {
	byName map[string]Operation
}

// NewOperations validates ops (after defaults), rejects duplicates and more
// than MaxOperations entries, and returns the set.
func NewOperations(ops ...Operation) (*Operations, error) {
	if len(ops) == 0 {
		return nil, &ConfigError{Setting: "operations", Reason: "none configured"}
	}
	if len(ops) > MaxOperations {
		return nil, &ConfigError{Setting: "operations",
			Reason: fmt.Sprintf("%d configured, out of range [1, %d]", len(ops), MaxOperations)}
	}
	set := &Operations{byName: make(map[string]Operation, len(ops))}
	for _, o := range ops {
		o = o.WithDefaults()
		if err := o.Validate(); err != nil {
			return nil, err
		}
		if _, dup := set.byName[o.Name]; dup {
			return nil, &ConfigError{Setting: "operation " + o.Name, Reason: "configured twice"}
		}
		set.byName[o.Name] = o
	}
	return set, nil
}

// Lookup returns the operation named name.
func (s *Operations) Lookup(name string) (Operation, bool) {
	if s == nil {
		return Operation{}, false
	}
	o, ok := s.byName[name]
	return o, ok
}

// Len returns the number of operations.
func (s *Operations) Len() int {
	if s == nil {
		return 0
	}
	return len(s.byName)
}

// Resolve validates r with [Validate] and returns its configured operation,
// or an error matching [ErrInvalidRequest] or [ErrUnknownOperation]. Stores
// call it before touching their backend.
func (s *Operations) Resolve(r Request) (Operation, error) {
	if err := Validate(r); err != nil {
		return Operation{}, err
	}
	o, ok := s.Lookup(r.Operation)
	if !ok {
		return Operation{}, ErrUnknownOperation
	}
	return o, nil
}
