"""The API server's TLS identity: a cluster CA and the serving certificate it signed.

Why TLS on a loopback-only server: kubectl (client-go's clientcmd) sends a kubeconfig's
credentials, the bearer token included, only to an `https://` server; over plain HTTP it drops
them without a word and every request is 401. And with the CA pinned in the kubeconfig, a client
never hands the token to another local user's listener that took the port while the API server
was down.

`DIR/pki/` (0700) holds `ca.crt` (the cluster CA: written into the kubeconfig as
`certificate-authority-data`, and read by the kubelets and `up`), `apiserver.crt` and
`apiserver.key` (0600, IP 127.0.0.1 and DNS localhost). The CA's private key is never written: it
signs the serving certificate and is dropped, so nothing can mint another certificate the
clients would trust. The directory is made once (in a temporary directory, then renamed into
place, so two starters cannot mix their files) and kept across `down`/`up` like DIR/token;
remove it to get a new one (kubeconfigs are rewritten by the next `up`).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from localkube.errors import LocalkubeError

PKI_DIR = "pki"
CA_FILE = "ca.crt"
CERT_FILE = "apiserver.crt"
KEY_FILE = "apiserver.key"
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
VALIDITY = datetime.timedelta(days=3650)
SERVER_ADDRESS = "127.0.0.1"


class CertificateError(LocalkubeError):
    """DIR/pki is missing, incomplete or expired; the message says what to do."""


@dataclass(frozen=True)
class ServingFiles:
    ca: Path
    cert: Path
    key: Path


def serving_files(state_dir: str | os.PathLike) -> ServingFiles:
    pki = Path(state_dir) / PKI_DIR
    return ServingFiles(pki / CA_FILE, pki / CERT_FILE, pki / KEY_FILE)


def ensure_serving_files(state_dir: str | os.PathLike) -> ServingFiles:
    """The state dir's CA and serving certificate, made first when it has none."""
    files = serving_files(state_dir)
    if not files.ca.parent.exists():
        create_pki_dir(files.ca.parent)
    return check_serving_files(files)


def check_serving_files(files: ServingFiles) -> ServingFiles:
    """The files, when all are there and the certificate is still valid; CertificateError
    saying what to do otherwise."""
    missing = [str(p) for p in (files.ca, files.cert, files.key) if not p.exists()]
    if missing:
        raise CertificateError(
            f"{', '.join(missing)} missing; remove {files.ca.parent} and run "
            f"`python -m localkube up` again to make a new CA and "
            f"certificate"
        )
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    if cert.not_valid_after_utc <= datetime.datetime.now(datetime.UTC):
        raise CertificateError(
            f"{files.cert} expired on {cert.not_valid_after_utc:%Y-%m-%d}; "
            f"run `python -m localkube down`, remove {files.ca.parent}, then "
            f"`up` (it writes a new kubeconfig)"
        )
    return files


def read_ca_pem(state_dir: str | os.PathLike) -> str:
    """The cluster CA certificate (PEM) clients verify the API server with."""
    path = serving_files(state_dir).ca
    try:
        return path.read_text()
    except OSError as error:
        raise CertificateError(
            f"cannot read the cluster CA {path}: {error}; start the cluster "
            f"with `python -m localkube up` first"
        ) from None


def build_server_ssl_context(files: ServingFiles) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(files.cert, files.key)
    return context


def build_client_ssl_context(ca_pem: str) -> ssl.SSLContext:
    """A client context that trusts the cluster CA only (and checks the address)."""
    context = ssl.create_default_context(cadata=ca_pem)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def create_pki_dir(pki: Path) -> None:
    """Make the CA and serving certificate in a temporary directory, then rename it to `pki`;
    when another starter renamed its own first, keep theirs."""
    ca_pem, cert_pem, key_pem = generate_serving_pems()
    building = Path(tempfile.mkdtemp(prefix=".pki-", dir=pki.parent))  # 0700
    try:
        for name, data in ((CA_FILE, ca_pem), (CERT_FILE, cert_pem), (KEY_FILE, key_pem)):
            fd = os.open(building / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
        try:
            building.rename(pki)
        except OSError:
            if not pki.is_dir():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)


def generate_serving_pems() -> tuple[bytes, bytes, bytes]:
    """(CA certificate, serving certificate, serving key) as PEM; the CA key is dropped."""
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localkube-ca")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localkube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=False,
                crl_sign=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(SERVER_ADDRESS)), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return (
        ca_cert.public_bytes(serialization.Encoding.PEM),
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
