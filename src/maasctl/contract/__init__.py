"""The contract shared by the controller, maas-api, the gateway and billing, so they can never disagree.

- `views`: typed read views of MaaSSubscription, MaaSModelRef and MaaSAuthPolicy (parsed once per version);
- `selection`: which subscription a request or a new key is charged to;
- `health`: the Active / Degraded / Failed rule;
- `labels`: what the controller marks on generated objects and the data plane reads;
- `cel`: the CEL environment with Kuadrant's string functions;
- `windows` and `quantities`: rate-limit windows and token limits as people write them.

Import from the module that owns a name.
"""

__all__ = ["cel", "health", "labels", "quantities", "selection", "views", "windows"]
