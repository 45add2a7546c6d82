"""Credentials for tests: signing keys, their JWK set, JWTs, tokens files, a self-signed CA."""

from __future__ import annotations

import datetime
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

AUDIENCE = "changebroker"
ISSUER = "https://issuer.test"


@dataclass
class Issuer:
    """An RSA and an EC signing key and a shared HMAC secret, published as one JWK set."""

    rsa_key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    ec_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    secret: bytes = b"an HMAC secret of at least thirty-two bytes!"
    generation: int = 1  # part of the key ids: a new generation is a rotation

    def kid(self, algorithm: str) -> str:
        return f"{algorithm.lower()}-{self.generation}"

    def jwks(self) -> dict[str, Any]:
        keys = []
        for algorithm, public in [
            ("RS256", self.rsa_key.public_key()),
            ("ES256", self.ec_key.public_key()),
        ]:
            jwk = json.loads(jwt.algorithms.get_default_algorithms()[algorithm].to_jwk(public))
            keys.append({**jwk, "kid": self.kid(algorithm), "alg": algorithm, "use": "sig"})
        hmac = json.loads(jwt.algorithms.HMACAlgorithm.to_jwk(self.secret))
        keys.append({**hmac, "kid": self.kid("HS256"), "alg": "HS256"})
        return {"keys": keys}

    def write_jwks(self, path: Path) -> Path:
        path.write_text(json.dumps(self.jwks()))
        return path

    def rotate(self) -> None:
        self.rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec_key = ec.generate_private_key(ec.SECP256R1())
        self.generation += 1

    def token(
        self,
        sub: str,
        scopes: list[str] = (),  # type: ignore[assignment]
        *,
        algorithm: str = "RS256",
        lifetime: float = 600,
        **claims: Any,
    ) -> str:
        now = time.time()
        payload = {
            "sub": sub,
            "scope": " ".join(scopes),
            "aud": AUDIENCE,
            "iss": ISSUER,
            "iat": int(now),
            "exp": int(now + lifetime),
            **claims,
        }
        key: Any = {"RS256": self.rsa_key, "ES256": self.ec_key, "HS256": self.secret}[algorithm]
        return jwt.encode(payload, key, algorithm=algorithm, headers={"kid": self.kid(algorithm)})


def tokens_file(path: Path, tokens: dict[str, tuple[str, list[str]]]) -> Path:
    """A tokens file: token -> (subject, scopes)."""
    document = {t: {"sub": sub, "type": "service", "scopes": s} for t, (sub, s) in tokens.items()}
    path.write_text(json.dumps(document))
    return path


@dataclass(frozen=True)
class Certificates:
    ca: Path
    cert: Path
    key: Path


def self_signed_ca(
    directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
) -> Certificates:
    """A CA and a server certificate it signs for ``hosts``, as PEM files."""
    import ipaddress

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "changebroker test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    files = Certificates(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    files.ca.write_bytes(ca_cert.public_bytes(pem))
    files.cert.write_bytes(cert.public_bytes(pem))
    files.key.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return files
