"""Cluster backends behind the ports in ``hetsched.ports``: the embedded in-memory cluster (``memory``) and
the Kubernetes adapter (``kubernetes``) implement the same ports; beside them the cluster-spec expander
(``spec``), leader election, the admission webhook with its TLS and restriction, and cluster dumps."""
