"""The MaaS web console (issue 20): administrators publish models, manage subscriptions and read usage;
users mint keys, see their subscriptions and the models they can call.

Server-rendered pages (Jinja2, autoescaped), a little vanilla JS, charts as inline SVG: nothing is fetched
from outside the cluster. The console is a client: it acts as the signed-in user on the Kubernetes API and on
maas-api (the user's own bearer token, or their OIDC ID token that the API server trusts), so RBAC and
maas-api's own checks apply to everything it does. See docs/console.md.
"""
