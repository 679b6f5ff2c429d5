"""Keeping an OIDC session alive: before the ID token (the user's credential) expires, the console trades the
refresh token for a new one, so a session lasts its own lifetime (8 hours), not the ID token's.

One replica renews at a time (the store's lock: a rotated refresh token is good for one use, and a provider
that sees one used twice revokes the whole grant); a replica that waited reads the identity the other one
stored. The new ID token goes through TokenReview like the first one (the API server is what trusts it) and
must name the same user; its groups replace the old ones. A refused refresh ends the session: the user signs
in again. A provider that cannot be reached ends nothing while the current ID token still works.
"""

from __future__ import annotations

import time
from dataclasses import replace

import structlog

from maasctl.console.kube import Kube, KubeError
from maasctl.console.oidc import OidcClient, OidcError, OidcRefused
from maasctl.console.sessions import Identity, Session, SessionStore

log = structlog.get_logger("maasctl.console")


class SessionEnded(Exception):
    """The session cannot go on (message safe to show on the sign-in page)."""


class RenewalUnavailable(Exception):
    """The credential has expired and cannot be renewed right now (the provider or the API server is down)."""


async def renewed(identity: Identity, session: Session, sessions: SessionStore, oidc: OidcClient | None,
                  kube: Kube) -> Identity:
    """`identity`, renewed when it is due; stored for every replica before it is returned."""
    if oidc is None or not identity.due_for_refresh(time.time()):
        return identity
    async with sessions.lock(session):
        current = await sessions.current_identity(session)
        if current is None:
            raise SessionEnded("Your session has ended. Sign in again.")
        if not current.due_for_refresh(time.time()):
            return current  # another request (maybe on another replica) renewed it meanwhile
        assert current.refresh_token is not None
        try:
            tokens = await oidc.refresh(current.refresh_token)
            who = await kube.token_review(tokens.id_token)
        except OidcRefused as exc:
            log.info("console_session_refresh_refused", user=current.username)
            raise SessionEnded("Your session has ended at the identity provider. Sign in again.") from exc
        except (OidcError, KubeError) as exc:
            log.warning("console_session_refresh_failed", user=current.username, error=type(exc).__name__)
            if current.expires_at is not None and current.expires_at > time.time():
                return current  # the ID token still works: the next request tries again
            raise RenewalUnavailable() from exc
        if who is None or who[0] != current.username:
            log.info("console_session_refresh_refused", user=current.username, reason="token_review")
            raise SessionEnded("Your session has ended: the renewed sign-in was not accepted. Sign in again.")
        fresh = replace(current, credential=tokens.id_token, groups=who[1], expires_at=tokens.expires_at,
                        issued_at=tokens.issued_at, refresh_token=tokens.refresh_token or current.refresh_token)
        session.identity = fresh
        await sessions.persist(session)  # inside the lock: every replica sees it before the lock goes
        log.info("console_session_refreshed", user=fresh.username)
        return fresh
