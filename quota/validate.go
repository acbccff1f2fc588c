package quota

import "strconv"

// Validate checks that every field of r is present and well formed:
// Project, SubjectType, SubjectID and Operation are 1..MaxIDBytes bytes and
// the receipt id 1..MaxReceiptIDBytes bytes, all drawn from
// [A-Za-z0-9._:-], and the fingerprint is not all zero. The error matches
// [ErrInvalidRequest], names the field and never repeats its value.
func Validate(r Request) error {
	if err := r.Bucket().Validate(); err != nil {
		return err
	}
	if reason := checkID(r.ReceiptID, MaxReceiptIDBytes); reason != "" {
		return &InvalidRequestError{Field: "receipt id", Reason: reason}
	}
	if r.Fingerprint == ([32]byte{}) {
		return &InvalidRequestError{Field: "fingerprint", Reason: "missing (all zero)"}
	}
	return nil
}

// Validate checks that Project, SubjectType, SubjectID and Operation are
// each 1..MaxIDBytes bytes of [A-Za-z0-9._:-], as [Validate] does for a
// request. The error matches [ErrInvalidRequest], names the field and
// never repeats its value.
func (b Bucket) Validate() error {
	fields := [...]struct{ name, value string }{
		{"project", b.Project},
		{"subject type", b.SubjectType},
		{"subject id", b.SubjectID},
		{"operation", b.Operation},
	}
	for _, f := range fields {
		if reason := checkID(f.value, MaxIDBytes); reason != "" {
			return &InvalidRequestError{Field: f.name, Reason: reason}
		}
	}
	return nil
}

// checkID returns "" when s is 1..max bytes of [A-Za-z0-9._:-], or why not.
func checkID(s string, max int) string {
	if len(s) == 0 {
		return "empty"
	}
	if len(s) > max {
		return "longer than " + strconv.Itoa(max) + " bytes"
	}
	for i := 0; i < len(s); i++ {
		if !idByte(s[i]) {
			return "byte " + strconv.Itoa(i) + " outside [A-Za-z0-9._:-]"
		}
	}
	return ""
}

func idByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '.', c == '_', c == ':', c == '-':
		return true
	}
	return false
}
