"""Monitoring: usage samples in, bounded history, accounting, ``/metrics``, idle reclaim.

See README.md in this directory for what each module owns and the invariants.
"""
