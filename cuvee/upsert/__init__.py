"""Upsert: the latest row per primary key (DESIGN.md §10). Pure logic here; the server wires it in."""
