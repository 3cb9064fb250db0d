"""API objects (Kubernetes core and Volcano CRDs), resource quantities and manifest validation.

The bottom layer: everything else imports from here, and this package imports nothing of hetsched's.
"""
