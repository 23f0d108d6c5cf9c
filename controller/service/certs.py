"""Throw-away certificates, as `tectl certs DIR` writes them: a CA, a server certificate and
one client certificate per role, with SPIFFE-style URI SANs, plus a policy file granting each
its role. For tests, demos and benchmarks only: short-lived, unencrypted keys; never commit
them (`certs/` is git-ignored).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from pathlib import Path
from typing import Any

DEFAULT_CLIENTS = ("admin", "scheduler", "monitor", "reader")


def _key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, data: bytes, private: bool = False) -> None:
    """`data` in a new file at `path` (one there before, or a symbolic link, is replaced,
    not written through); a private one is 0600 from its creation, never readable by others
    between its write and a chmod."""
    path.unlink(missing_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(path, flags, 0o600 if private else 0o666)  # less the umask
    with os.fdopen(fd, "wb") as out:
        if private:
            os.fchmod(fd, 0o600)  # whatever the umask
        out.write(data)


def _pem_key(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())  # fmt: skip


def make_ca(directory: Path, name: str = "ca", days: int = 2) -> tuple[Any, Any]:
    """A self-signed CA `name`.pem / `name`.key in `directory`; returns (cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    key = _key()
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"fabric-te test {name}")])
    cert = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                       critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    _write(directory / f"{name}.pem", cert.public_bytes(serialization.Encoding.PEM))
    _write(directory / f"{name}.key", _pem_key(key), private=True)
    return cert, key


def make_cert(
    directory: Path, name: str, ca: tuple[Any, Any], *, uri: str | None = None,
    hosts: tuple[str, ...] = (), server: bool = False, days: int = 2, ou: str = "fabric-te",
) -> None:  # fmt: skip
    """`name`.pem / `name`.key signed by `ca`: a server (DNS/IP SANs) or a client cert."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_cert, ca_key = ca
    key = _key()
    now = dt.datetime.now(dt.UTC)
    sans: list[x509.GeneralName] = []
    if uri:
        sans.append(x509.UniformResourceIdentifier(uri))
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name),
                         x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou)])  # fmt: skip
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )  # fmt: skip
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write(directory / f"{name}.pem", cert.public_bytes(serialization.Encoding.PEM))
    _write(directory / f"{name}.key", _pem_key(key), private=True)


def make_certs(
    directory: Path, *, domain: str = "fabric-te.test", clients: tuple[str, ...] = DEFAULT_CLIENTS,
    hosts: tuple[str, ...] = ("localhost", "127.0.0.1", "::1"), days: int = 2,
) -> dict[str, str]:  # fmt: skip
    """CA, server and clients (client `x` gets role `x` if it is a role name, else reader)
    in `directory`, and `policy.yaml`; returns client name -> URI SAN."""
    from controller.service.auth import ROLES

    directory.mkdir(parents=True, exist_ok=True)
    ca = make_ca(directory, days=days)
    make_cert(directory, "server", ca, uri=f"spiffe://{domain}/server", hosts=hosts,
              server=True, days=days)  # fmt: skip
    uris = {}
    lines = ["# throw-away test policy made by `tectl certs`", "identities:"]
    for client in clients:
        uri = f"spiffe://{domain}/{client}"
        make_cert(directory, client, ca, uri=uri, days=days)
        role = client if client in ROLES else "reader"
        lines.append(f"  {uri}: [{role}]")
        uris[client] = uri
    _write(directory / "policy.yaml", ("\n".join(lines) + "\n").encode())
    return uris
