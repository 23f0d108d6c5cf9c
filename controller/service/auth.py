"""Who is calling, and may they: client identities, roles and the policy file.

A client is known by its certificate (mTLS): the SPIFFE-style URI SAN when it has one, else
its subject's CN, else OU. The policy file maps identities to roles:

    # policy.yaml
    identities:
      spiffe://example.org/fabric-te/slurm: [scheduler]
      spiffe://example.org/fabric-te/ops/*: [admin]     # trailing * = prefix match
      CN=netmon: [monitor]
      OU=sre: [reader]

and each role allows a fixed set of methods (`METHOD_ROLES`); `admin` allows every method.
An identity matches by each of its names (URI SANs, `CN=...`, `OU=...`) and gets the union
of their roles. Health checking and reflection are open to any client the TLS handshake
accepted. Without TLS the one identity is `anonymous`.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from controller.errors import InputError

log = logging.getLogger("fabric_te.auth")

ROLES = ("scheduler", "monitor", "reader", "admin")
# TrafficEngineering method -> the roles (besides admin) that may call it
METHOD_ROLES: dict[str, frozenset[str]] = {
    "PutJob": frozenset({"scheduler"}),
    "DeleteJob": frozenset({"scheduler"}),
    "ListJobs": frozenset({"scheduler", "reader"}),
    "Advise": frozenset({"scheduler"}),
    "Score": frozenset({"scheduler"}),
    "ReportLinks": frozenset({"monitor"}),
    "StreamLinkReports": frozenset({"monitor"}),
    "GetRoutes": frozenset({"reader"}),
    "StreamRoutes": frozenset({"reader"}),
    "WatchRoutes": frozenset({"reader"}),
    "Status": frozenset({"reader"}),
    "Solve": frozenset({"reader"}),
    "Resilience": frozenset({"reader"}),  # reads what is installed; pushes nothing
    # routes from a file override the engine for the whole fabric: admin only
    "ApplyRoutes": frozenset(),
    "RollbackRoutes": frozenset(),
    "ReleaseRoutes": frozenset(),
}
ANONYMOUS = "anonymous"


@dataclass(frozen=True)
class Identity:
    """A caller: `name` for logs and limits, `names` to match against the policy."""

    name: str
    names: tuple[str, ...]


ANONYMOUS_IDENTITY = Identity(ANONYMOUS, (ANONYMOUS,))
# a certificate the handshake accepted whose names do not parse: no name, so no role
UNREADABLE_IDENTITY = Identity("unreadable-certificate", ())


@functools.lru_cache(maxsize=1024)
def identity_of_pem(pem: bytes) -> Identity:
    """The identity in a PEM client certificate: URI SANs, then CN, then OU."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        cert = x509.load_pem_x509_certificate(pem)
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
            uris = [str(u) for u in san.value.get_values_for_type(x509.UniformResourceIdentifier)]
        except x509.ExtensionNotFound:
            uris = []
        subject = cert.subject
    except ValueError:  # e.g. a SAN TLS accepts that `cryptography` does not parse
        return UNREADABLE_IDENTITY
    cns = [f"CN={a.value!s}" for a in subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    ous = [
        f"OU={a.value!s}"
        for a in subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    ]
    names = tuple(uris + cns + ous)
    return Identity(names[0] if names else "unnamed-certificate", names)


def identity_of(auth_context: Mapping[str, list[bytes]]) -> Identity:
    """The caller's identity from a gRPC auth context (anonymous without a certificate)."""
    pem = auth_context.get("x509_pem_cert")
    if not pem:
        return ANONYMOUS_IDENTITY
    return identity_of_pem(pem[0])


@dataclass(frozen=True)
class Policy:
    """Identity pattern -> roles. A pattern ending in `*` matches by prefix."""

    roles: Mapping[str, frozenset[str]]

    def roles_of(self, identity: Identity) -> frozenset[str]:
        out: set[str] = set()
        for pattern, roles in self.roles.items():
            if any(_match(pattern, n) for n in identity.names):
                out |= roles
        return frozenset(out)

    def allows(self, identity: Identity, method: str) -> bool:
        """May `identity` call TrafficEngineering `method`?"""
        roles = self.roles_of(identity)
        return "admin" in roles or bool(roles & METHOD_ROLES.get(method, frozenset()))


def _match(pattern: str, name: str) -> bool:
    return name.startswith(pattern[:-1]) if pattern.endswith("*") else name == pattern


def parse_policy(doc: object, where: str = "policy") -> Policy:
    """A Policy from a parsed document; errors name the file and the field path."""
    if not isinstance(doc, dict) or set(doc) != {"identities"}:
        raise InputError(f"{where}: expected a mapping with exactly the key 'identities'")
    entries = doc["identities"]
    if not isinstance(entries, dict):
        raise InputError(f"{where}: identities: expected a mapping of identity -> [roles]")
    roles: dict[str, frozenset[str]] = {}
    for name, listed in entries.items():
        field = f"{where}: identities[{name!r}]"
        if not isinstance(name, str) or not name or name == "*":
            raise InputError(f"{field}: an identity is a non-empty string other than '*'")
        if not isinstance(listed, list) or not listed:
            raise InputError(f"{field}: expected a non-empty list of roles")
        for i, role in enumerate(listed):
            if role not in ROLES:
                raise InputError(
                    f"{field}[{i}]: unknown role {role!r}; known: {', '.join(ROLES)}"
                )
        roles[name] = frozenset(listed)
    return Policy(roles)


def load_policy(path: str | Path) -> Policy:
    """Read and check a policy file (YAML or JSON)."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise InputError(f"{path}: cannot read the policy file: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: the policy file is not UTF-8 text: {err}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise InputError(f"{path}: not valid YAML: {err}") from None
    return parse_policy(doc, str(path))


class PolicyStore:
    """The live policy; `reload()` re-reads the file and keeps the old one if it is bad."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.policy = load_policy(self.path)

    def reload(self) -> bool:
        """Re-read the file; False (old policy kept, error logged) if it is invalid."""
        try:
            policy = load_policy(self.path)
        except InputError as err:
            log.error("policy not reloaded, keeping the previous one: %s", err)
            return False
        with self._lock:
            self.policy = policy
        log.info("policy reloaded from %s: %d identities", self.path, len(policy.roles))
        return True
