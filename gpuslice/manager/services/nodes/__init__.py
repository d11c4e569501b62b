"""Nodes and their agents: ``registration`` (join tokens, credentials), ``heartbeats``
(capacity, devices, images, usage), ``reports`` (a session's actual state as its agent sees it),
``assignments`` (the desired state and requests, by long-poll), ``views`` (what admins see),
``groups`` (the resource groups of the alive nodes; moving a node to another) and ``liveness``
(silent nodes become LOST and their sessions end).
"""
