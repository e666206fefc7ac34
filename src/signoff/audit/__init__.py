"""The hash-chained audit trail (docs/audit.md): sealing, checkpoints, export, verify."""
