"""The manager's logic and queries, one package per resource; routes call in, ``db`` is below.

Packages (each owns its rows and rules; its ``__init__`` says what):
``sessions/`` (launch, views, logs, commands, commit, status stream), ``nodes/`` (identity,
heartbeats, state reports, assignments, liveness), ``images/`` (catalog, node reports,
aliases, registry), ``scheduling/`` (the pass and guarded allocation).

Cross-cutting, at the root: ``lifecycle`` (the one door for a session's status), ``channel``
(the one way to ask an agent for something), ``policies``, ``users``, ``auth``.

Imports point down or sideways without cycles: ``sessions`` → ``scheduling``, ``images``,
``channel``; ``nodes`` → ``images``, ``channel``; every package → the root modules → ``db``.
No root module imports a package.
"""
