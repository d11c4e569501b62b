"""Compute sessions as users see them: ``launch`` (create, destroy), ``views`` (who may see
which, listings, the public shape), ``logs``, ``commands`` (exec), ``commit`` (to an image), and
``stream`` (status changes as server-sent events). Status changes go through
``services.lifecycle``; anything that needs the session's node goes through ``services.channel``.
"""
