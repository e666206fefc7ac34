"""One-click decisions: the approve and reject links of a message and Slack's buttons,
which decide through the approval services like the API."""
