"""Placing PENDING sessions: ``passes`` loads the cluster, decides with the pure core
(``manager.scheduler``) and applies each placement through ``allocation``, the guarded write
that never over-allocates.
"""
