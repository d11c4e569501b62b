"""Projects: teams with quotas and resource groups (see README.md)."""
