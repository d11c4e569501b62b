"""API schemas shared by the manager, the CLI, the SDK and the agent, one module per resource.

Schemas are grouped by role: ``<Entity>Create`` (what a client sends), ``<Entity>Update``,
``<Entity>Public`` (what the manager answers; never carries a secret hash).
"""
