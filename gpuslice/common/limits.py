"""Limits of the API that clients and the manager must agree on, defined once.

The manager's routes and settings read them from here; the CLI and the SDK should too.
"""

from __future__ import annotations

PAGE_DEFAULT = 100  # items in a listing's page when the caller gives no limit
PAGE_MAX = 500  # the largest page the manager answers
CREATE_COUNT_MAX = 100  # sessions one create request may ask for, at the most (settings cap lower)
