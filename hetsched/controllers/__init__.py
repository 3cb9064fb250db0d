"""Controllers: reconcile Volcano Jobs into PodGroups and pods, and give plain pods a PodGroup.

They talk to the cluster only through ``hetsched.ports.ObjectStore`` and read time from an injected
``Clock``, so the same code runs in the simulator and in the ``hetsched controller`` process against Kubernetes.
"""
