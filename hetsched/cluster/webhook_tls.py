"""The webhook's TLS, made and kept by the webhook itself: a private CA and a serving certificate in a
``kubernetes.io/tls`` Secret, and that CA in the webhook registrations' ``caBundle``.

Who calls it: ``hetsched webhook --tls-secret NAMESPACE/NAME`` (the manifests run it so), at start and then
every few minutes. No private key is ever written into a manifest, and the plain manifests and the chart
install the same way.

Rules:
- The Secret holds ``tls.crt``, ``tls.key`` and ``ca.crt``. It is reused while the certificate covers every
  name asked for and stays valid for ``RENEW_BEFORE`` more days; otherwise a new CA and certificate replace
  it (an update carrying the resourceVersion read). Of replicas racing to create or replace it, one wins
  (the API server answers the others 409) and the others read and use the winner's.
- The certificate names the Service (``NAME``, ``NAME.NAMESPACE``, ``NAME.NAMESPACE.svc``), ``localhost`` and
  ``127.0.0.1`` (a webhook registered by URL on the host's network).
- Each registration named gets the CA as the ``caBundle`` of every webhook entry, when it differs (read,
  then update with its resourceVersion; retried on 409). A registration not there yet is reported, and set
  on the next round.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from hetsched.cluster.kubernetes import KubeClient
from hetsched.ports import Conflict, NotFound

log = logging.getLogger("hetsched.webhook")
CA_DAYS = 3650
CERT_DAYS = 365
RENEW_BEFORE = 30
REGISTRATION_KINDS = ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")


@dataclass(frozen=True)
class Tls:
    cert: bytes
    key: bytes
    ca: bytes


def hosts_for(service: str, namespace: str) -> list[str]:
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", "localhost", "127.0.0.1"]


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def generate(hosts: Sequence[str], now: datetime.datetime | None = None) -> Tls:
    """A new CA (P-256) and a serving certificate for ``hosts`` signed by it."""
    now = now or datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("hetsched-webhook-ca")).issuer_name(_name("hetsched-webhook-ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=CA_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return Tls(cert=cert.public_bytes(serialization.Encoding.PEM),
               key=key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()),
               ca=ca.public_bytes(serialization.Encoding.PEM))


def usable(tls: Tls, hosts: Sequence[str], now: datetime.datetime | None = None) -> bool:
    """True when the certificate parses, covers every host and stays valid for RENEW_BEFORE more days."""
    now = now or datetime.datetime.now(datetime.UTC)
    try:
        cert = x509.load_pem_x509_certificate(tls.cert)
        serialization.load_pem_private_key(tls.key, password=None)
        x509.load_pem_x509_certificate(tls.ca)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    covered = {str(n) for n in names.get_values_for_type(x509.DNSName)}
    covered |= {str(n) for n in names.get_values_for_type(x509.IPAddress)}
    return set(hosts) <= covered and cert.not_valid_after_utc - now > datetime.timedelta(days=RENEW_BEFORE)


def _from_secret(secret: dict[str, object]) -> Tls | None:
    data = secret.get("data")
    if not isinstance(data, dict):
        return None
    try:
        return Tls(*(base64.b64decode(str(data[key])) for key in ("tls.crt", "tls.key", "ca.crt")))
    except (KeyError, ValueError):
        return None


def ensure_secret(client: KubeClient, namespace: str, name: str, hosts: Sequence[str]) -> Tls:
    """The certificate to serve with: the Secret's when usable, else a new one written to the Secret."""
    path = f"/api/v1/namespaces/{namespace}/secrets/{name}"
    for _ in range(5):
        try:
            secret = client.request("GET", path)
        except NotFound:
            secret = None
        found = _from_secret(secret) if secret else None
        if found is not None and usable(found, hosts):
            return found
        fresh = generate(hosts)
        body = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": name, "namespace": namespace, "labels": {
                    "app.kubernetes.io/name": "hetsched", "app.kubernetes.io/component": "webhook"}},
                "data": {key: base64.b64encode(value).decode() for key, value in
                         (("tls.crt", fresh.cert), ("tls.key", fresh.key), ("ca.crt", fresh.ca))}}
        try:
            if secret is None:
                client.request("POST", f"/api/v1/namespaces/{namespace}/secrets", body=body)
            else:
                metadata = secret.get("metadata")
                version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
                body["metadata"]["resourceVersion"] = version  # type: ignore[index]
                client.request("PUT", path, body=body)
            log.info("webhook certificate for %s written to Secret %s/%s", ", ".join(hosts), namespace, name)
            return fresh
        except Conflict:  # another replica wrote it first: use theirs
            continue
    raise Conflict(f"Secret {namespace}/{name} kept changing while the webhook certificate was written")


def ensure_ca_bundle(client: KubeClient, registrations: Sequence[str], ca: bytes) -> list[str]:
    """Set ``ca`` as every webhook's caBundle in the named registrations; returns those not found."""
    bundle = base64.b64encode(ca).decode()
    missing = []
    for name in registrations:
        for kind in REGISTRATION_KINDS:
            path = f"/apis/admissionregistration.k8s.io/v1/{kind}/{name}"
            try:
                for _ in range(5):
                    found = client.request("GET", path)
                    webhooks = found.get("webhooks") or []
                    if all((w.get("clientConfig") or {}).get("caBundle") == bundle for w in webhooks):
                        break
                    for entry in webhooks:
                        entry.setdefault("clientConfig", {})["caBundle"] = bundle
                    try:
                        client.request("PUT", path, body=found)
                        log.info("caBundle set on %s %s", kind, name)
                        break
                    except Conflict:
                        continue
                break
            except NotFound:
                continue
        else:
            missing.append(name)
    return missing


def memory_file(content: bytes, name: str) -> str:
    """A path the ssl module can load ``content`` from, without writing to disk (the root file system is
    read-only): an anonymous in-memory file, read through /proc/self/fd."""
    descriptor = os.memfd_create(name, 0)
    os.write(descriptor, content)
    return f"/proc/self/fd/{descriptor}"
