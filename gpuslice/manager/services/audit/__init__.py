"""The audit log (issue 43): see README.md for what gets a row and the invariants."""
