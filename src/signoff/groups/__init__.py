"""Groups: named sets of an org's people (docs/groups.md)."""
