"""Policies: an org's ordered rules (CEL conditions) that decide routine requests at
create, within budgets, proven on history by a dry run (docs/policies.md)."""
