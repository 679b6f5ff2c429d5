"""Rules shared by the controller, maas-api and the gateway, so the three can never disagree.

`cel` (the CEL environment with Kuadrant's string functions), `selection` (which subscription a request is
charged to) and `windows` (rate-limit window strings). Import from the module that owns a name.
"""

__all__ = ["cel", "selection", "windows"]
