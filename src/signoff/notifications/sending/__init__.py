"""Sending: the claimed notification rows rendered into messages and sent on their
channels (mail, Slack, Teams, Discord, signed webhooks), with retries."""
