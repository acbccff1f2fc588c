package pgquota

// HistoryDDL and MigrationSQL let the tests build a database at an older
// schema version, as a binary of that version would have left it.
const HistoryDDL = historyDDL

func MigrationSQL(m Migration) string { return m.sql }
