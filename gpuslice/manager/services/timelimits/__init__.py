"""Time limits and scheduled starts: what a session may ask for, and the sweep that warns and
ends sessions at their limit (see README.md beside this file)."""
