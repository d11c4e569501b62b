"""The image catalog: ``catalog`` (listing, resolution, visibility, curation), ``app_catalog``
(the apps an image gives a session: which, their commands and tokens), ``reports`` (what nodes
and the registry say they have), ``aliases`` and ``registry`` (a Docker registry's HTTP API v2,
read before any transaction opens).
"""
