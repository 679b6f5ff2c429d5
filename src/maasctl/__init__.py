"""maasctl: a Models-as-a-Service control plane for Kubernetes."""

__version__ = "0.1.0"
