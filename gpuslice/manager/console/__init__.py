"""The web console: a static client of the JSON API, served by the manager at ``/``.

See README.md beside this file for what it owns and why it is built this way.
"""
