"""Storage folders: the storage root (``fs``), folders and grants (``folders``), files through
the API (``files``, ``archive``), usage and quotas (``usage``), and session mounts
(``mounts``). Its invariants are in README.md beside this file."""
