"""Pure builders: typed inputs -> desired Kubernetes objects (plain dicts). No I/O, no clock, no environment.

One module per generated kind (`httproute`, `authpolicy`, `gatewayauth`, `trlp`, `inferenceobjective`), plus
`credentials` (the authentication every generated AuthPolicy shares),
`names` (names, labels, opt-out), `refs` (small input types), `validation` and `status` (request-priority status rules).
Import from the module that owns a name, e.g. `from maasctl.builders.trlp import build_token_rate_limit_policy`.
"""

__all__ = [
    "authpolicy",
    "celcheck",
    "credentials",
    "gatewayauth",
    "httproute",
    "inferenceobjective",
    "names",
    "refs",
    "status",
    "trlp",
    "validation",
]
