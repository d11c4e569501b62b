"""Business logic and queries. Routes call these; these raise ``gpuslice.manager.errors``."""
