"""Session network isolation: what a session container can reach, and how that is enforced.

The policy, per node:

- Every session runs in the node's own Docker bridge network (``gpuslice-<node>``, bridge
  ``gs<hash>``) with inter-container traffic off, never on Docker's default bridge: wired
  in by Docker, or in a network sandbox that is (``sandboxes.py``).
- A session cannot open a connection to another session, to the host (any of its addresses:
  the bridge gateway, the node's own IPs, ports it publishes), to the manager's addresses, to
  link-local addresses (``169.254.0.0/16``, cloud metadata) or to the admin's
  ``network.deny`` networks; IPv6 is off inside sessions.
- Everything else outbound stays open (package registries, the internet) unless the admin sets
  ``network.egress = "none"``.
- The host may connect to a session (the agent reaches apps at the container's address on this
  network), and replies flow back.
- Sessions need no network path to the platform: their one door is the in-session endpoint, a
  Unix socket (``agent/endpoint.py``).

How: Docker gives the network (``enable_icc=false``); what Docker cannot (the host's own
addresses, the manager, metadata, egress) is a pair of iptables chains of the agent's own,
``GS-<hash>-IN`` (jumped to from ``INPUT``) and ``GS-<hash>-FWD`` (from ``DOCKER-USER``, the
chain Docker keeps first in ``FORWARD`` for its users), matching this network's bridge only:
other containers and networks on the machine are untouched. The agent installs them at start
(replacing what a previous run left) and removes them and the network when it stops, unless
session containers still run there (``gpuslice up`` stopped with Ctrl-C leaves them running:
they stay fenced until the next start adopts them). With ``network.isolation = "off"`` none of
this happens (a machine where the agent cannot run iptables as root); the agent says so.

- ``policy.py``: the rules as iptables argument lists (pure).
- ``firewall.py``: applying and removing them with the Debian ``iptables`` package.
- ``network.py``: the Docker network (Engine API) and the whole fence, start to stop.
- ``sandboxes.py``: warm network sandboxes in that network, which starting sessions join
  (one session at a time, one owner's sessions only); its docstring has the invariants.
"""
