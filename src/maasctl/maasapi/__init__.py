"""maas-api: API keys bound to subscriptions, subscription listing and gateway callbacks.

Public entry points: `create_app` (maasctl.maasapi.app), `serve` (maasctl.maasapi.server),
`MaasApiSettings`, and the `SubscriptionSource` / `Authenticator` protocols.
"""

from maasctl.maasapi.settings import MaasApiSettings

__all__ = ["MaasApiSettings"]
