"""``hetsched doctor``'s checks: the seed's troubleshooting tables (000 §4) run as code.

Who calls it: ``cli.doctor`` gathers the facts (from the embedded cluster or a real API server, and on a
node from the vendor tools and kubelet's files) and calls the checks here; each returns
:class:`~hetsched.diagnose.findings.Finding` values. The checks only read the facts they are given, so the
same check runs on both backends and in tests.
"""
