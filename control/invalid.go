package control

import (
	"errors"
	"slices"
	"strings"

	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/control/internal/jsonapi"
	"github.com/bulwarkhq/bulwark/wire"
)

// InvalidFields is the answer to a request whose values a library
// refused with err, a conf.Errors (or one conf.FieldError) whose paths
// are the request's member names, as from a Validate or an Update: 400
// invalid_request whose detail names every invalid member by its key.
// The detail gives each key with its message when they all fit in a
// detail, else the keys alone ("Invalid: flags[1], k."), else the keys
// without their indices ("Invalid: flags, k."); err is kept as the
// cause.
func InvalidFields(err error) *Error { return InvalidFieldsAs(err, nil) }

// InvalidFieldsAs is InvalidFields for a request whose member names
// differ from the library's keys: a key in rename (before any index) is
// named by its value instead, e.g. {"k": "sigma_multiplier"}.
func InvalidFieldsAs(err error, rename map[string]string) *Error {
	var es conf.Errors
	var fe *conf.FieldError
	switch {
	case errors.As(err, &es):
	case errors.As(err, &fe):
		es = conf.Errors{fe}
	}
	keys := make([]string, 0, len(es))
	msgs := make([]string, 0, len(es))
	bases := make([]string, 0, len(es))
	for _, e := range es {
		base, index, indexed := strings.Cut(e.Path, "[")
		if to, ok := rename[base]; ok {
			base = to
		}
		key := base
		if indexed {
			key += "[" + index
		}
		keys = append(keys, key)
		msgs = append(msgs, key+": "+e.Msg)
		bases = append(bases, base)
	}
	out := &Error{Code: wire.CodeInvalidRequest, Err: err}
	if len(es) == 0 {
		return out
	}
	for _, d := range []string{
		strings.Join(msgs, "; ") + ".",
		"Invalid: " + strings.Join(keys, ", ") + ".",
		"Invalid: " + strings.Join(slices.Compact(bases), ", ") + ".",
	} {
		if jsonapi.ValidDetail(d) {
			out.Detail = d
			break
		}
	}
	return out
}
