"""Server-side mTLS: credentials that pick up rotated certificate files without a restart.

gRPC asks `ServerTls._fetch` before every new TLS handshake; it answers with a new
configuration when the files changed (size or mtime) or after `reload()` (SIGHUP), else
None. Established connections, and the watches on them, keep their session. A file set that
does not load (bad PEM, key not matching the certificate) is logged and the previous
configuration stays in use.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc
from prometheus_client import CollectorRegistry, Counter

from controller.errors import InputError

log = logging.getLogger("fabric_te.tls")


@dataclass(frozen=True)
class TlsFiles:
    """PEM files: the server's certificate chain and key, and the CA bundle for clients."""

    cert: Path
    key: Path
    client_ca: Path

    def signature(self) -> tuple[tuple[int, int], ...]:
        """(mtime ns, size) of each file: changes when a file is replaced or rewritten."""
        out = []
        for p in (self.cert, self.key, self.client_ca):
            try:
                st = os.stat(p)
                out.append((st.st_mtime_ns, st.st_size))
            except OSError:
                out.append((-1, -1))
        return tuple(out)


def load_config(files: TlsFiles) -> grpc.ServerCertificateConfiguration:
    """Read and check the files: each parses, the key matches the certificate."""
    cert, key, ca = checked_pems(files.cert, files.key, files.client_ca, "--tls-client-ca")
    return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)


def checked_pems(
    cert: str | os.PathLike[str], key: str | os.PathLike[str], ca: str | os.PathLike[str],
    ca_flag: str = "--tls-ca",
) -> tuple[bytes, bytes, bytes]:
    """The bytes of a certificate chain, its key and a CA bundle, each checked to parse and
    the key to match the certificate: a bad file is an InputError naming it and its flag
    (`--tls-cert`, `--tls-key`, `ca_flag`), not a handshake that fails later without a
    word of which file. Used by the server and by the client alike."""
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    data = {}
    for path, flag in ((cert, "--tls-cert"), (key, "--tls-key"), (ca, ca_flag)):
        try:
            data[flag] = Path(path).read_bytes()
        except OSError as err:
            raise InputError(f"{path}: cannot read {flag}: {err.strerror}") from None
    try:
        leaf = x509.load_pem_x509_certificates(data["--tls-cert"])[0]
    except ValueError as err:
        raise InputError(f"{cert}: --tls-cert is not a PEM certificate: {err}") from None
    try:
        private = serialization.load_pem_private_key(data["--tls-key"], password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as err:
        raise InputError(f"{key}: --tls-key is not an unencrypted PEM private key: "
                         f"{err}") from None  # fmt: skip
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    try:
        public = leaf.public_key().public_bytes(*spki)
    except (ValueError, UnsupportedAlgorithm) as err:
        raise InputError(f"{cert}: --tls-cert has a key of no supported kind: {err}") from None
    if private.public_key().public_bytes(*spki) != public:
        raise InputError(f"{key}: --tls-key does not match the certificate in {cert}")
    try:
        x509.load_pem_x509_certificates(data[ca_flag])
    except ValueError as err:
        raise InputError(f"{ca}: {ca_flag} is not a PEM CA bundle: {err}") from None
    return data["--tls-cert"], data["--tls-key"], data[ca_flag]


class ServerTls:
    """mTLS server credentials (client certificates required) that follow their files."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self._lock = threading.Lock()
        self._signature = files.signature()
        self._initial = load_config(files)
        self._pending: grpc.ServerCertificateConfiguration | None = None
        self.reloads = 0

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self._initial, self._fetch, require_client_authentication=True
        )

    def reload(self) -> bool:
        """Re-read the files now (SIGHUP); False, and the old ones kept, if they are bad."""
        with self._lock:
            return self._load(self.files.signature())

    def _load(self, signature: tuple[tuple[int, int], ...]) -> bool:
        try:
            config = load_config(self.files)
        except InputError as err:
            log.error("certificates not reloaded, keeping the previous ones: %s", err)
            self._signature = signature  # do not retry the same bad files every handshake
            return False
        self._pending, self._signature = config, signature
        self.reloads += 1
        log.info("certificates reloaded from %s", self.files.cert)
        return True

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """Called by gRPC before each handshake: a new configuration, or None."""
        with self._lock:
            signature = self.files.signature()
            if signature != self._signature:
                self._load(signature)
            config, self._pending = self._pending, None
            return config


# what gRPC's core says when it rejects a handshake, and the reason it is counted under
HANDSHAKE_FAILED = re.compile(r"Handshake failed with error (\w+)(.*)")
HANDSHAKE_REASONS = (
    ("PEER_DID_NOT_RETURN_A_CERTIFICATE", "no_client_certificate"),
    ("WRONG_VERSION_NUMBER", "not_tls"),
    ("HTTP_REQUEST", "not_tls"),
    ("certificate has expired", "expired_certificate"),
    ("certificate is not yet valid", "expired_certificate"),
    ("unsupported certificate purpose", "wrong_purpose"),
    ("certificate signature failure", "untrusted_certificate"),
    ("unable to get local issuer certificate", "untrusted_certificate"),
    ("self signed certificate", "untrusted_certificate"),
    ("CERTIFICATE_VERIFY_FAILED", "untrusted_certificate"),
    ("NO_SHARED_CIPHER", "no_shared_cipher"),
    ("UNSUPPORTED_PROTOCOL", "protocol_version"),
)


def handshake_reason(line: str) -> str | None:
    """The reason a gRPC core log line gives for a rejected TLS handshake (None: not one)."""
    m = HANDSHAKE_FAILED.search(line)
    if m is None:
        return None
    for needle, reason in HANDSHAKE_REASONS:
        if needle in line:
            return reason
    return "other"


class HandshakeFailures:
    """`fabric_te_tls_handshake_failures_total{reason}`, counted from gRPC's own log lines
    (gRPC Python has no hook for a handshake it rejects)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.counter = Counter(
            "fabric_te_tls_handshake_failures", "TLS handshakes the server rejected, by reason",
            ["reason"], registry=registry,
        )  # fmt: skip
        for _, reason in HANDSHAKE_REASONS:  # every series exists from the start, at 0
            self.counter.labels(reason)
        self.counter.labels("other")

    def observe(self, line: str) -> None:
        reason = handshake_reason(line)
        if reason is not None:
            self.counter.labels(reason).inc()
