"""Authentication and authorisation: one layer every role's HTTP surface goes through (docs/security.md)."""
