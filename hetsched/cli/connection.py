"""How a command reaches a Kubernetes API server, and which namespace it means, as kubectl decides both.

Who calls it: the day-2 commands (``cli.jobs``, ``cli.queues``, ``cli.pending``) and ``cli.doctor``
(``doctor``, ``explain``). The options are kubectl's own — ``--kubeconfig``, ``--context``, ``-n`` /
``--namespace``, ``-A`` — so ``kubectl hetsched …`` (kubectl hands a plugin its arguments as they are)
works as users type it; ``--server`` + ``--token-file`` (+ ``--ca-file``) for a token without a kubeconfig.

The namespace is ``-n``, else the kubeconfig context's namespace, else the pod's own (in-cluster), else
``default``. A connection problem is one line and exit 2 (:func:`connect`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hetsched.cli.output import say, stderr_console

if TYPE_CHECKING:
    from hetsched.cluster.kubernetes import KubeClient

Kubeconfig = Annotated[str | None, typer.Option("--kubeconfig", envvar="KUBECONFIG", help="kubeconfig file")]
Context = Annotated[str | None, typer.Option("--context", help="kubeconfig context (default: its current one)")]
Namespace = Annotated[str | None, typer.Option(
    "--namespace", "-n", help="namespace (default: the kubeconfig context's, else default)")]
AllNamespaces = Annotated[bool, typer.Option("--all-namespaces", "-A", help="every namespace")]
Server = Annotated[str | None, typer.Option(envvar="HETSCHED_SERVER", help="API server URL (with --token-file)")]
TokenFile = Annotated[Path | None, typer.Option(envvar="HETSCHED_TOKEN_FILE", help="bearer token file")]
CaFile = Annotated[Path | None, typer.Option(envvar="HETSCHED_CA_FILE", help="CA of the API server")]
Insecure = Annotated[bool, typer.Option("--insecure", envvar="HETSCHED_INSECURE",
                                        help="do not verify the API server's certificate")]
JsonOut = Annotated[bool, typer.Option("--json", help="machine-readable output")]

IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True)
class Connection:
    kubeconfig: str | None = None
    context: str | None = None
    server: str | None = None
    token_file: Path | None = None
    ca_file: Path | None = None
    insecure: bool = False

    def client(self) -> KubeClient:
        """The API client, or one line on stderr and exit 2 (no kubeconfig, a broken one, a missing flag)."""
        from hetsched.cluster.kubernetes import KubeClient

        try:
            return KubeClient.connect(self.kubeconfig, self.server, str(self.token_file) if self.token_file else None,
                                      str(self.ca_file) if self.ca_file else None, self.insecure, self.context)
        except Exception as exc:  # no cluster to talk to: say why in one line
            say(stderr_console(), "error", f"cannot connect: {' '.join(str(exc).split())[:500]}")
            raise typer.Exit(2) from None

    def namespace(self, given: str | None) -> str:
        """``given``, else the context's namespace, else the pod's own, else ``default``."""
        if given:
            return given
        if not self.server:
            import kubernetes.config

            try:
                contexts, current = kubernetes.config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
                    config_file=self.kubeconfig)
            except Exception:  # no kubeconfig: in a pod, or nothing (connect says so)
                contexts, current = [], None
            chosen = next((c for c in contexts if c.get("name") == self.context), None) if self.context else current
            if chosen and (chosen.get("context") or {}).get("namespace"):
                return str(chosen["context"]["namespace"])
            if not contexts and IN_CLUSTER_NAMESPACE.is_file():
                return IN_CLUSTER_NAMESPACE.read_text(encoding="utf-8").strip() or "default"
        return "default"


def fail(message: str) -> typer.Exit:
    """``error: <message>`` on stderr; raise the returned exit (code 2)."""
    say(stderr_console(), "error", message)
    return typer.Exit(2)
