"""Installing hetsched on Kubernetes: the values, every object built once from them, and their rendering
as plain manifests (``hetsched install --print``, ``deploy/hetsched.yaml``) and as the Helm chart."""
