"""The kubelet device plugin (API v1beta1 over gRPC on a unix socket): ``server`` serves a vendor backend's
chips to kubelet; ``api.proto`` is the API, its Python code generated in the build (``codegen``)."""
