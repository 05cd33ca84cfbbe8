"""What ``cuvee status`` says of a table's configs: the keys Cuvee accepted without acting on them (hints, keys it
does not know) and any refused key a config stored before the refusal still carries. Pure: it takes the configs as
the controller returns them (``GET /tables/{t}``, ``GET /tables/{t}/schema``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cuvee.config.pinot_keys import review_schema, review_table
from cuvee.config.support import ConfigReview, Support


def config_notes(tables: Mapping[str, Any], schema: Any) -> list[dict[str, Any]]:
    """One note per key: ``{"config": "REALTIME"|"OFFLINE"|"schema", "path", "support", "why"}``."""
    reviews: list[tuple[str, ConfigReview]] = [(kind, review_table(doc)) for kind, doc in sorted(tables.items())]
    if schema is not None:
        reviews.append(("schema", review_schema(schema)))
    notes = []
    for kind, found in reviews:
        for finding in found.refused:
            notes.append({"config": kind, **finding.to_json(),
                          "why": f"{finding.why} (stored before Cuvee refused it: NOT applied)"})
        notes.extend({"config": kind, **finding.to_json()} for finding in found.listed)
    return notes

