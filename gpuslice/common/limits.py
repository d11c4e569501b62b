"""Limits and defaults of the API that clients and the manager must agree on, defined once.

The manager's routes, settings and schemas read them from here (a request for sessions is
checked by ``gpuslice.common.schemas.sessions.SessionCreate``), and so do the CLI's options and
the SDK's defaults.

Plain values, importable without pydantic: `gpuslice session create --help` shows them without
building the schema models (``tests/cli/test_imports.py``, ``bench/cli_start.py``).
"""

from __future__ import annotations

from gpuslice.common.resources import MiB

# Listings
PAGE_DEFAULT = 100  # items in a listing's page when the caller gives no limit
PAGE_MAX = 500  # the largest page the manager answers

# A request for sessions
DEFAULT_GPU = "0"
DEFAULT_CPU = "1"
DEFAULT_MEM = "1g"
# Docker refuses to start a container with less memory than this; asked for, a session would
# be placed and only then fail on its node.
MIN_MEM = 6 * MiB
DEFAULT_TYPE = "interactive"
CREATE_COUNT_MAX = 100  # sessions one create request may ask for, at the most (settings cap lower)
PRIORITY_BOUND = 100
