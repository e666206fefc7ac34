"""signoff: a self-hostable approval gateway for automations and AI agents."""

__version__ = "0.1.0"
