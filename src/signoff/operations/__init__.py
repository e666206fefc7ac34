"""Operating a deployment: metrics, readiness, retention."""
