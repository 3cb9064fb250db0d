"""Node agents: what runs on each accelerator node — vendor-tool parsers and backends, the kubelet device
plugin, and the health agent."""
