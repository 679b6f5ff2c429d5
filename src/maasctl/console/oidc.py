"""OpenID Connect sign-in: the authorization-code flow with PKCE (S256), state and nonce.

The console does not trust the ID token on its own: it hands it to the API server's TokenReview, which
checks issuer, audience, signature and expiry (the API server is configured with the same issuer and client
id). The token then serves as the user's credential for the Kubernetes API and maas-api, so RBAC and
maas-api see the same user and groups as the console. The console itself checks the nonce (binding the
token to this browser's request) and the issuer and audience claims.

Refresh (`refresh`): when the provider issued a refresh token, the console trades it for a new ID token before
the current one expires (`console.renewal`); the new token is checked the same way (issuer, audience; no nonce:
OIDC Core 12.2) and then by TokenReview. A provider that refuses the refresh token (`OidcRefused`) ends the
session; one that cannot be reached does not (`OidcError`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import ssl
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx

from maasctl.console.sessions import PendingLogin
from maasctl.console.settings import OidcSettings

PENDING_SECONDS = 600


class OidcError(Exception):
    """The provider or the returned token cannot be used for a sign-in (message safe to show)."""


class OidcRefused(OidcError):
    """The provider refused a refresh token (expired, revoked, already used): the session cannot go on."""


@dataclass(frozen=True)
class Tokens:
    """What a token response gave: the ID token (checked claims), its times, and a refresh token if any."""

    id_token: str = field(repr=False)
    claims: dict[str, Any] = field(repr=False)
    refresh_token: str | None = field(default=None, repr=False)

    @property
    def expires_at(self) -> float | None:
        exp = self.claims.get("exp")
        return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None

    @property
    def issued_at(self) -> float | None:
        iat = self.claims.get("iat")
        return float(iat) if isinstance(iat, int | float) and not isinstance(iat, bool) else None


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def claims(id_token: str) -> dict[str, Any]:
    """The payload of a compact JWS (signature checked by the API server's TokenReview, not here)."""
    parts = id_token.split(".")
    if len(parts) != 3:
        raise OidcError("the provider returned a malformed ID token")
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError as exc:
        raise OidcError("the provider returned a malformed ID token") from exc
    if not isinstance(payload, dict):
        raise OidcError("the provider returned a malformed ID token")
    return payload


class OidcClient:
    def __init__(self, settings: OidcSettings, redirect_uri: str) -> None:
        self.settings = settings
        self.redirect_uri = redirect_uri
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=settings.ca_file) if settings.ca_file \
            else True
        self._http = httpx.AsyncClient(verify=verify, timeout=15.0, follow_redirects=False)
        self._metadata: dict[str, Any] | None = None

    async def close(self) -> None:
        await self._http.aclose()

    async def metadata(self) -> dict[str, Any]:
        if self._metadata is None:
            url = self.settings.issuer.rstrip("/") + "/.well-known/openid-configuration"
            try:
                resp = await self._http.get(url)
                resp.raise_for_status()
                meta = resp.json()
            except (httpx.HTTPError, ValueError) as exc:
                raise OidcError("the identity provider cannot be reached") from exc
            if meta.get("issuer") != self.settings.issuer:
                raise OidcError("the identity provider reports a different issuer than configured")
            self._metadata = meta
        return self._metadata

    @staticmethod
    def new_pending() -> PendingLogin:
        return PendingLogin(state=secrets.token_urlsafe(32), nonce=secrets.token_urlsafe(32),
                            verifier=secrets.token_urlsafe(64), created=time.time())

    async def authorization_url(self, pending: PendingLogin) -> str:
        meta = await self.metadata()
        challenge = _b64url(hashlib.sha256(pending.verifier.encode()).digest())
        query = urlencode({
            "response_type": "code",
            "client_id": self.settings.client_id,
            "redirect_uri": self.redirect_uri,
            "scope": " ".join(self.settings.scopes),
            "state": pending.state,
            "nonce": pending.nonce,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        })
        return f"{meta['authorization_endpoint']}?{query}"

    async def _token(self, form: dict[str, str]) -> dict[str, Any] | None:
        """POST to the token endpoint with the client's credentials: the JSON answer, or None when the
        provider refused (4xx); OidcError when it cannot be reached or answers nonsense."""
        meta = await self.metadata()
        try:
            resp = await self._http.post(meta["token_endpoint"], data=form,
                                         auth=(self.settings.client_id, self.settings.client_secret))
        except httpx.HTTPError as exc:
            raise OidcError("the identity provider cannot be reached") from exc
        if 400 <= resp.status_code < 500:
            return None
        if resp.status_code != 200:
            raise OidcError("the identity provider cannot be reached")
        try:
            body = resp.json()
        except ValueError as exc:
            raise OidcError("the identity provider answered something other than tokens") from exc
        if not isinstance(body, dict):
            raise OidcError("the identity provider answered something other than tokens")
        return body

    def _tokens(self, body: dict[str, Any]) -> Tokens:
        id_token = str(body.get("id_token") or "")
        payload = claims(id_token)
        if payload.get("iss") != self.settings.issuer:
            raise OidcError("the ID token comes from another issuer")
        aud = payload.get("aud")
        if self.settings.client_id not in (aud if isinstance(aud, list) else [aud]):
            raise OidcError("the ID token is meant for another client")
        refresh = body.get("refresh_token")
        return Tokens(id_token, payload, refresh if isinstance(refresh, str) and refresh else None)

    async def exchange(self, code: str, pending: PendingLogin) -> Tokens:
        """Trade the code for tokens (the ID token's claims not yet verified: TokenReview does that)."""
        if time.time() - pending.created > PENDING_SECONDS:
            raise OidcError("the sign-in took too long: start again")
        body = await self._token({"grant_type": "authorization_code", "code": code,
                                  "redirect_uri": self.redirect_uri, "code_verifier": pending.verifier})
        if body is None:
            raise OidcError("the identity provider refused the sign-in")
        tokens = self._tokens(body)
        if tokens.claims.get("nonce") != pending.nonce:
            raise OidcError("the ID token does not belong to this sign-in")
        return tokens

    async def refresh(self, refresh_token: str) -> Tokens:
        """A new ID token for a refresh token. OidcRefused when the provider refuses it or answers without an
        ID token (nothing to renew the credential with)."""
        body = await self._token({"grant_type": "refresh_token", "refresh_token": refresh_token})
        if body is None or not body.get("id_token"):
            raise OidcRefused("the identity provider refused to renew the session")
        try:
            return self._tokens(body)
        except OidcError as exc:
            raise OidcRefused(str(exc)) from exc
