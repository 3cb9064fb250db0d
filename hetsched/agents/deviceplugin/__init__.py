"""The kubelet device plugin (API v1beta1 over gRPC on a unix socket): ``server`` serves a vendor backend's
chips to kubelet; ``api.proto`` is the API, its Python code generated in the build (``codegen``). gRPC is
the ``agents`` extra: nothing here imports it until a plugin is served."""

from pathlib import Path

DEFAULT_DIR = Path("/var/lib/kubelet/device-plugins")
"""kubelet's device-plugin directory (its Registration socket, and ours)."""
VGPU_LIBRARY = "/usr/local/vgpu/libvgpu.so"
"""Where HAMi's images and installer put HAMi-core's library (``vgpu``)."""
VGPU_STATE = "/var/lib/hetsched/vgpu"
"""The host folder where the vGPU plugin writes the ``ld.so.preload`` it mounts into vGPU containers."""
