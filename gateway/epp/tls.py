"""The ext_proc port's TLS: the gRPC server credentials `kvgate epp` listens with.

On by default, as the reference picker's. Without `cert_path`, a self-signed certificate
(ECDSA P-256, CN `kvgate-epp`, valid ten years) is made in memory at start; gateways dial it
without verifying it (Envoy: an `UpstreamTlsContext` without a validation context; Istio: a
rule with `tls.mode: SIMPLE` and `insecureSkipVerify`). With `cert_path`, the directory's
`tls.crt` and `tls.key` (a Kubernetes TLS Secret's keys) serve and are followed: gRPC asks
`CertificateFiles.fetch` before each new connection's handshake, which at most once per
`check_interval_s` compares the files' stamps and, when they changed, loads the pair. A pair
that does not load or whose key does not match leaves the previous one serving, with a
warning. Connections already open keep theirs. Health and metrics stay plaintext.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.http.tls import read_stamp
from routing.config.schema import ConfigError

log = logging.getLogger(__name__)
SELF_SIGNED_DAYS = 3650
_PUBLIC = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def self_signed_pair(name: str = "kvgate-epp") -> tuple[bytes, bytes]:
    """A fresh self-signed certificate and its key, PEM: (key, certificate)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_DAYS))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


def load_pair(cert_file: Path, key_file: Path) -> tuple[bytes, bytes]:
    """The PEM key and certificate chain read from the files, checked to belong together:
    (key, chain). Raises ValueError (or OSError) if they do not."""
    chain, key_pem = cert_file.read_bytes(), key_file.read_bytes()
    leaf = x509.load_pem_x509_certificates(chain)[0]
    key = serialization.load_pem_private_key(key_pem, password=None)
    if key.public_key().public_bytes(*_PUBLIC) != leaf.public_key().public_bytes(*_PUBLIC):
        raise ValueError(f"the key in {key_file} does not match the certificate in {cert_file}")
    return key_pem, chain


class CertificateFiles:
    """`DIR/tls.crt` and `DIR/tls.key`, loaded at start (bad files raise) and re-read when
    they change; `fetch` is gRPC's certificate-configuration fetcher."""

    def __init__(
        self,
        directory: str | Path,
        *,
        check_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.files = (Path(directory) / "tls.crt", Path(directory) / "tls.key")
        self._interval = check_interval_s
        self._clock = clock
        self._stamp = read_stamp(self.files)
        self.pair = load_pair(*self.files)
        self._checked = clock()

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """A new configuration when the files changed and loaded, else None (keep serving)."""
        now = self._clock()
        if now - self._checked < self._interval:
            return None
        self._checked = now
        try:
            stamp = read_stamp(self.files)
            if stamp == self._stamp:
                return None
            pair = load_pair(*self.files)
        except (OSError, ValueError) as exc:
            log.warning("ext_proc TLS certificate not reloaded, the previous one serves: %s", exc)
            return None
        self._stamp, self.pair = stamp, pair
        log.info("ext_proc TLS certificate reloaded from %s", self.files[0])
        return grpc.ssl_server_certificate_configuration([pair])


def add_ext_proc_port(
    server: grpc.aio.Server, address: str, *, secure: bool, cert_path: str | None
) -> tuple[int, str]:
    """Listen on `address` as asked; the port bound and a few words for the start-up line."""
    if not secure:
        return server.add_insecure_port(address), "plaintext"
    if cert_path is None:
        credentials = grpc.ssl_server_credentials([self_signed_pair()])
        return server.add_secure_port(address, credentials), "TLS, self-signed"
    try:
        files = CertificateFiles(cert_path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--cert-path {cert_path}: {exc}") from None
    initial = grpc.ssl_server_certificate_configuration([files.pair])
    credentials = grpc.dynamic_ssl_server_credentials(initial, files.fetch)
    return server.add_secure_port(address, credentials), f"TLS, {files.files[0]}, reloaded"
