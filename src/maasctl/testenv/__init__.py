"""A real local Kubernetes control plane (etcd + kube-apiserver + kube-controller-manager).

Used by the test suite, the e2e suite and `maasctl dev`. The binary is built from Go modules by
`hack/k8s-testenv` (see `binary.py`); nothing here is a fake.
"""

from maasctl.testenv.binary import ensure_binary
from maasctl.testenv.controlplane import ControlPlane, TestUser

__all__ = ["ControlPlane", "TestUser", "ensure_binary"]
