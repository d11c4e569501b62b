"""The manager's logic and queries, one package per resource; routes call in, ``db`` is below.

Packages (each owns its rows and rules; its ``__init__`` says what):
``sessions/`` (launch, views, logs, commands, commit, status stream), ``nodes/`` (identity,
heartbeats, state reports, assignments, liveness, resource groups), ``images/`` (catalog, the
apps an image gives a session, node reports, aliases, registry), ``scheduling/`` (what a pass
reads, the pass, guarded allocation, preemption), and ``apps``, ``monitoring``, ``storage``,
``projects``, ``timelimits``, ``models``, ``runs``, ``ssh``, ``config``, ``notify``,
``audit``, ``identity`` (who a user of an identity provider is here).

Cross-cutting, at the root: ``lifecycle`` (the one door for a session's status), ``channel``
(the one way to ask an agent for something), ``policies``, ``presets``, ``priorities``,
``users``, ``auth``, ``breakglass``.

Imports point down, never in a circle; each line imports only from the lines below it (the
names on one line not from each other):

0. ``breakglass`` (``gpuslice admin recover``: the first admin reset on the manager host),
   ``sso`` (single sign-on: the OpenID Connect protocol, provider sessions, device and CLI
   sign-ins; who a signed-in person is, it asks ``identity``)
1. ``config``, ``identity``, ``runs``, ``users`` (a new user gets a personal project and their
   folder invitations)
2. ``nodes`` (the agents' side: heartbeats record usage samples, assignments start apps)
3. ``apps``, ``monitoring`` (both built on the sessions they show)
4. ``sessions``
5. ``scheduling``
6. ``priorities``, ``storage``, ``timelimits``
7. ``projects``
8. ``auth``, ``channel``, ``health``, ``images``, ``lifecycle``, ``models``, ``policies``,
   ``presets``, ``retention``, ``ssh``
9. ``audit`` (the services that decide for a user write its row in their transaction),
   ``login_throttle``, ``notify`` (a status change enqueues its notifications, in its
   transaction: ``lifecycle`` calls in)

then ``db``. ``lint-imports`` (``make lint``; the ``services`` contract in pyproject.toml) keeps
it so: a new package or root module is placed there first.
"""
