package limit

// SetAtomicTAT lets the model test resynchronize an AtomicGCRAState with
// the reference after a clock regression (see runGCRA).
func SetAtomicTAT(s *AtomicGCRAState, tat int64) { s.w.Store(tat ^ FullTAT) }
