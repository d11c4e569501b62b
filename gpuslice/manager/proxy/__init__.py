"""The app proxy: every session's apps under ``/s/<session>/<app>/``, for browsers (the login
cookie) and the CLI (bearer tokens), reached through links the nodes' agents dial back. Its
invariants are in README.md."""
