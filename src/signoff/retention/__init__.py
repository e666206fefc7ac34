"""Retention: deleting old finished requests with everything recorded about them."""
