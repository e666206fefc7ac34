"""Who a bearer token is: an API key's principal (remembered, as ``PrincipalsByKey`` says)
or an OAuth access token's, read afresh; and the key's use, recorded."""

from __future__ import annotations

from signoff.auth.principal import Principal
from signoff.auth.secrets import hash_api_key, looks_like_api_key
from signoff.common.time import utcnow
from signoff.oauth.credentials import hash_token, looks_like_access_token
from signoff.oauth.repository import OAuthRepository
from signoff.orgs.last_used import ConnectionUse
from signoff.orgs.repository import PrincipalsByKey
from signoff.storage import Database


class Callers:
    def __init__(self, db: Database) -> None:
        self._db = db
        # Who an API key is, read once per state of the database (orgs/repository.py).
        self.principals = PrincipalsByKey(db.queries)
        # When each connection's API key was last used, written once a minute at most.
        self.connection_use = ConnectionUse(db)

    def remembered_principal(self, token: str) -> Principal | None:
        """On PostgreSQL, the principal of an API key as this process last read it, for a
        call whose first statement confirms it (``PrincipalCheck``); else None."""
        if self._db.is_sqlite or not looks_like_api_key(token):
            return None  # SQLite's ``authenticate`` answers from memory; OAuth reads afresh
        principal = self.principals.remembered(hash_api_key(token))
        if principal is not None:
            self.connection_use.used(principal.connection_id)
        return principal

    def forget_principal(self, token: str) -> None:
        if looks_like_api_key(token):
            self.principals.forget(hash_api_key(token))

    async def authenticate(self, token: str) -> Principal | None:
        if looks_like_api_key(token):
            principal = await self.principals.find(hash_api_key(token))
            if principal is not None:
                self.connection_use.used(principal.connection_id)
            return principal
        if looks_like_access_token(token):
            # An OAuth access token: the consenting user, the token's scopes, and the
            # rate limit of the connection that owns the client (decisions.md section 1).
            async with self._db.read_session() as session:
                return await OAuthRepository(session).find_principal_by_access_token_hash(
                    hash_token(token), utcnow()
                )
        return None

    async def close(self) -> None:
        await self.connection_use.settled()
