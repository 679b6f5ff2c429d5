"""The contract shared by the controller, maas-api, the gateway and billing, so they can never disagree.

`cel` (the CEL environment with Kuadrant's string functions), `selection` (which subscription a request is
charged to), `windows` (rate-limit window strings) and `quantities` (token limits as people write them).
Import from the module that owns a name.
"""

__all__ = ["cel", "quantities", "selection", "windows"]
