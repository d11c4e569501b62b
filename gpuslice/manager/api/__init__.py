"""HTTP layer: routers (HTTP only), dependencies, and the one place errors become answers."""
