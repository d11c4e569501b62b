"""Persistence: ORM models, the engine factory and the Alembic migration tree."""
