"""Accelerator devices: per-node chip inventories and one topology policy per device family.

Who calls it: the cluster-spec expander (writes inventories), the scheduler cache (reads them) and the
``devicetopology`` scheduler plugin (feasibility, scores and the chip choice, vectorised over nodes through
the lookup tables of ``devices.policy``). Pure logic: imports only ``hetsched.api``.
"""
