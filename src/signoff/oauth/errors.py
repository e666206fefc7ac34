"""OAuth refusals. They are not ``AppError``s: RFC 6749 fixes their shapes.

- ``OAuthError``: the token, revocation and introspection endpoints answer
  ``{"error", "error_description"}`` (RFC 6749 section 5.2), not the API envelope.
- ``AuthorizeRedirectError``: a bad authorization request from a known client to a
  registered redirect URI goes back to that URI as ``?error=...`` (section 4.1.2.1).
- ``AuthorizePageError``: an unknown client or redirect URI must never be redirected to
  (section 4.1.2.1, open redirector), so the person sees an error page instead.
"""

from __future__ import annotations


class OAuthError(Exception):
    def __init__(self, error: str, description: str, status_code: int = 400) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status_code = status_code

    def to_body(self) -> dict[str, str]:
        return {"error": self.error, "error_description": self.description}


def invalid_request(description: str) -> OAuthError:
    return OAuthError("invalid_request", description)


def invalid_client(description: str = "Client authentication failed.") -> OAuthError:
    return OAuthError("invalid_client", description, 401)


def invalid_grant(description: str) -> OAuthError:
    return OAuthError("invalid_grant", description)


class AuthorizeRedirectError(Exception):
    def __init__(self, error: str, description: str) -> None:
        super().__init__(description)
        self.error = error
        self.description = description


class AuthorizePageError(Exception):
    def __init__(self, title: str, message: str) -> None:
        super().__init__(message)
        self.title = title
        self.message = message
