"""What a request for sessions defaults to and may ask for, read by the schema that checks it
(``gpuslice.common.schemas.sessions.SessionCreate``) and shown by the CLI's options.

Plain values, importable without pydantic: `gpuslice session create --help` shows them without
building the schema models (``tests/cli/test_imports.py``, ``bench/cli_start.py``).
"""

from __future__ import annotations

from gpuslice.common.resources import MiB

DEFAULT_GPU = "0"
DEFAULT_CPU = "1"
DEFAULT_MEM = "1g"
# Docker refuses to start a container with less memory than this; asked for, a session would
# be placed and only then fail on its node.
MIN_MEM = 6 * MiB
DEFAULT_TYPE = "interactive"
MAX_COUNT = 100
PRIORITY_BOUND = 100
