"""Self-made PKI for the loopback control plane: a serving CA, a client CA, the
service-account signing key, and client certificates (admin = system:masters)."""
from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _pem_cert(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass
class CA:
    key: object
    cert: x509.Certificate

    @classmethod
    def create(cls, cn: str) -> "CA":
        key = _key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        now = dt.datetime.now(dt.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5))
                .not_valid_after(now + dt.timedelta(days=7))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                             crl_sign=True, content_commitment=False,
                                             key_encipherment=False, data_encipherment=False,
                                             key_agreement=False, encipher_only=False,
                                             decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        return cls(key, cert)

    @property
    def cert_pem(self) -> bytes:
        return _pem_cert(self.cert)

    def issue(self, cn: str, *, orgs: tuple[str, ...] = (), server: bool = False,
              hosts: tuple[str, ...] = ()) -> tuple[bytes, bytes]:
        """(cert PEM, key PEM) for a client (``orgs`` become groups) or server cert."""
        key = _key()
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
        now = dt.datetime.now(dt.timezone.utc)
        b = (x509.CertificateBuilder().subject_name(x509.Name(attrs))
             .issuer_name(self.cert.subject).public_key(key.public_key())
             .serial_number(x509.random_serial_number())
             .not_valid_before(now - dt.timedelta(minutes=5))
             .not_valid_after(now + dt.timedelta(days=7))
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage(
                 [x509.oid.ExtendedKeyUsageOID.SERVER_AUTH if server
                  else x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if server:
            sans: list = []
            for h in hosts:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(h)))
                except ValueError:
                    sans.append(x509.DNSName(h))
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = b.sign(self.key, hashes.SHA256())
        return _pem_cert(cert), _pem_key(key)


def write_pki(directory: Path) -> dict[str, Path]:
    """Write every file the apiserver needs; return their paths by role."""
    directory.mkdir(parents=True, exist_ok=True)
    serving = CA.create("flux-plunger-test-serving-ca")
    client = CA.create("flux-plunger-test-client-ca")
    sa_key = _key()
    files = {
        "serving_ca": directory / "serving-ca.crt",
        "client_ca": directory / "client-ca.crt",
        "client_ca_key": directory / "client-ca.key",
        "tls_cert": directory / "apiserver.crt",
        "tls_key": directory / "apiserver.key",
        "sa_key": directory / "sa.key",
        "sa_pub": directory / "sa.pub",
        "admin_cert": directory / "admin.crt",
        "admin_key": directory / "admin.key",
    }
    files["serving_ca"].write_bytes(serving.cert_pem)
    files["client_ca"].write_bytes(client.cert_pem)
    files["client_ca_key"].write_bytes(_pem_key(client.key))
    crt, key = serving.issue("kube-apiserver", server=True,
                             hosts=("127.0.0.1", "localhost", "::1"))
    files["tls_cert"].write_bytes(crt)
    files["tls_key"].write_bytes(key)
    files["sa_key"].write_bytes(_pem_key(sa_key))
    files["sa_pub"].write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    crt, key = client.issue("admin", orgs=("system:masters",))
    files["admin_cert"].write_bytes(crt)
    files["admin_key"].write_bytes(key)
    return files
