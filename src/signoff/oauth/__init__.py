"""OAuth 2.0 with PKCE: integrations acting on behalf of users (docs/oauth.md)."""
