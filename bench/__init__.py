"""``make bench``: throughput and latency of signoff against plain-FastAPI baselines."""
