"""Rewrite the generated key reference in docs/configuration.md from the catalogue (cuvee/config/pinot_keys.py).

Run after changing the catalogue: ``.venv/bin/python scripts/config_reference.py``. tests/config/test_pinot_keys.py
fails while the docs and the catalogue differ.
"""

from __future__ import annotations

from pathlib import Path

from cuvee.config.pinot_keys import REFERENCE_END, REFERENCE_START, reference_markdown

DOCS = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def main() -> None:
    text = DOCS.read_text()
    start, end = text.index(REFERENCE_START), text.index(REFERENCE_END)
    DOCS.write_text(text[:start + len(REFERENCE_START)] + "\n\n" + reference_markdown() + "\n" + text[end:])
    print(f"rewrote the key reference in {DOCS}")


if __name__ == "__main__":
    main()
