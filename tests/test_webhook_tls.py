"""The webhook's own TLS (cluster/webhook_tls.py) against a scripted API: a certificate is made once and
reused, renewed before it expires or when a name is missing, the loser of a creation race uses the
winner's, and the CA lands in every webhook entry of the registrations (those not there yet reported).
The whole thing on a real cluster: tests/test_realnodes.py (the webhook pod makes its Secret and CA
bundle, the API server then calls it)."""

from __future__ import annotations

import base64
import copy
import datetime
import ssl
import tempfile
from pathlib import Path
from typing import Any

import pytest

from hetsched.cluster.webhook_tls import (
    Tls,
    ensure_ca_bundle,
    ensure_secret,
    generate,
    hosts_for,
    memory_file,
    usable,
)
from hetsched.ports import Conflict, NotFound

HOSTS = hosts_for("hetsched-webhook", "hetsched")


class FakeApi:
    """Objects by path; a PUT must carry the stored resourceVersion; ``race`` makes the next POST lose."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.race: dict[str, Any] | None = None
        self.writes = 0

    def _store(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = copy.deepcopy(body)
        stored.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.objects[path] = stored
        self.writes += 1
        return stored

    def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> dict[str, Any]:
        if method == "GET":
            if path not in self.objects:
                raise NotFound(path)
            return copy.deepcopy(self.objects[path])
        if method == "POST":
            target = f"{path}/{body['metadata']['name']}"
            if self.race is not None:  # another replica created it first
                self._store(target, self.race)
                self.race = None
            if target in self.objects:
                raise Conflict(target)
            return self._store(target, body)
        if method == "PUT":
            if self.objects[path]["metadata"]["resourceVersion"] != body["metadata"].get("resourceVersion"):
                raise Conflict(path)
            return self._store(path, body)
        raise AssertionError(method)


SECRET = "/api/v1/namespaces/hetsched/secrets/tls"


def secret_tls(api: FakeApi) -> Tls:
    data = api.objects[SECRET]["data"]
    return Tls(*(base64.b64decode(data[k]) for k in ("tls.crt", "tls.key", "ca.crt")))


def test_made_once_then_reused_and_served() -> None:
    api = FakeApi()
    first = ensure_secret(api, "hetsched", "tls", HOSTS)  # type: ignore[arg-type]
    assert usable(first, HOSTS) and secret_tls(api) == first
    assert ensure_secret(api, "hetsched", "tls", HOSTS) == first and api.writes == 1  # type: ignore[arg-type]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # the serving side loads it from memory, no disk
    context.load_cert_chain(memory_file(first.cert, "cert"), memory_file(first.key, "key"))
    with tempfile.NamedTemporaryFile() as ca:
        Path(ca.name).write_bytes(first.ca)
        client = ssl.create_default_context(cafile=ca.name)  # the CA verifies the certificate
        assert client.get_ca_certs()[0]["subject"] == ((("commonName", "hetsched-webhook-ca"),),)


def test_renewed_when_expiring_or_missing_a_name_or_garbage() -> None:
    api = FakeApi()
    old = generate(HOSTS, now=datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=350))
    assert not usable(old, HOSTS)  # 15 days left: renewed before it expires
    assert not usable(generate(HOSTS[:3]), HOSTS)  # localhost and 127.0.0.1 missing
    assert not usable(Tls(b"garbage", b"garbage", b"garbage"), HOSTS)
    api.objects[SECRET] = {"metadata": {"resourceVersion": "7"}, "data": {
        "tls.crt": base64.b64encode(old.cert).decode(), "tls.key": base64.b64encode(old.key).decode(),
        "ca.crt": base64.b64encode(old.ca).decode()}}
    fresh = ensure_secret(api, "hetsched", "tls", HOSTS)  # type: ignore[arg-type]
    assert fresh != old and usable(fresh, HOSTS) and secret_tls(api) == fresh


def test_the_loser_of_a_creation_race_uses_the_winners_certificate() -> None:
    api = FakeApi()
    winner = generate(HOSTS)
    api.race = {"metadata": {"name": "tls"}, "data": {
        "tls.crt": base64.b64encode(winner.cert).decode(), "tls.key": base64.b64encode(winner.key).decode(),
        "ca.crt": base64.b64encode(winner.ca).decode()}}
    assert ensure_secret(api, "hetsched", "tls", HOSTS) == winner  # type: ignore[arg-type]


def test_the_ca_goes_into_every_webhook_entry_and_missing_registrations_are_reported() -> None:
    api = FakeApi()
    path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/hetsched-validate"
    api.objects[path] = {"metadata": {"resourceVersion": "1"}, "webhooks": [
        {"name": "a", "clientConfig": {"url": "https://127.0.0.1:9443/validate"}}, {"name": "b"}]}
    tls = generate(HOSTS)
    assert ensure_ca_bundle(api, ["hetsched-validate", "hetsched-mutate"], tls.ca) == ["hetsched-mutate"]  # type: ignore[arg-type]
    bundle = base64.b64encode(tls.ca).decode()
    assert [w["clientConfig"]["caBundle"] for w in api.objects[path]["webhooks"]] == [bundle, bundle]
    writes = api.writes
    ensure_ca_bundle(api, ["hetsched-validate"], tls.ca)  # type: ignore[arg-type]
    assert api.writes == writes  # nothing to change: nothing written


@pytest.mark.parametrize("value", ["hetsched", "/x", "x/"])
def test_a_bad_tls_secret_option_is_a_usage_error(value: str) -> None:
    from typer.testing import CliRunner

    from hetsched.cli.main import app

    result = CliRunner().invoke(app, ["webhook", "--tls-secret", value, "--metrics-address", "off"])
    assert result.exit_code == 2 and "NAMESPACE/NAME" in result.output
