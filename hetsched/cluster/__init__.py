"""Cluster backends behind the ports in ``hetsched.ports``: the embedded in-memory cluster (``memory``) and
the cluster-spec expander (``spec``). The Kubernetes adapter joins them later, implementing the same ports."""
