"""The web console the controller serves at ``/console/``: static files in this package (no build step), which
call the controller's own REST API, and ``POST /sql``, which hands a query to a live broker with the caller's
credentials (so the broker, not the controller, decides what the caller may read). docs/console.md.
"""

from cuvee.console.routes import console_router

__all__ = ["console_router"]
