"""Run the real OpenID provider (npm oidc-provider on Node, installed by hack/setup-console.sh) over HTTPS
with a CA made for the test, an RSA signing key, one client (the console) and an account table."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import ipaddress
import json
import os
import secrets
import shutil
import ssl
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from maasctl.testenv.controlplane import ManagedProcess, free_port

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "hack" / "oidc-provider"
CLIENT_ID = "maas-console"


def install_dir() -> Path:
    """Where hack/setup-console.sh installed the pinned packages (same key as the script)."""
    digest = hashlib.sha256((SOURCE / "package.json").read_bytes() + (SOURCE / "package-lock.json").read_bytes())
    base = Path(os.environ.get("MAASCTL_CACHE", Path.home() / ".cache" / "maasctl"))
    path = base / "oidc-provider" / digest.hexdigest()[:16]
    if not (path / ".installed").exists():
        raise RuntimeError(f"the test OpenID provider is not installed in {path}: run ./hack/setup.sh")
    return path


def _b64(n: int) -> str:
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _jwk(key: rsa.RSAPrivateKey) -> dict[str, str]:
    priv, pub = key.private_numbers(), key.public_key().public_numbers()
    return {"kty": "RSA", "alg": "RS256", "use": "sig", "kid": secrets.token_hex(8), "n": _b64(pub.n),
            "e": _b64(pub.e), "d": _b64(priv.d), "p": _b64(priv.p), "q": _b64(priv.q), "dp": _b64(priv.dmp1),
            "dq": _b64(priv.dmq1), "qi": _b64(priv.iqmp)}


def _tls(directory: Path) -> tuple[Path, Path, Path, str]:
    """CA, server certificate for 127.0.0.1 and key; and the server key's SPKI hash (for Chromium)."""
    now = dt.datetime.now(dt.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "maasctl test OIDC CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + dt.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    ca_file, cert_file, key_file = directory / "oidc-ca.pem", directory / "oidc-tls.crt", directory / "oidc-tls.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_file.chmod(0o600)
    spki = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return ca_file, cert_file, key_file, base64.b64encode(hashlib.sha256(spki).digest()).decode()


@dataclass
class OidcProvider:
    issuer: str
    ca_file: Path
    spki: str
    client_secret_file: Path
    process: ManagedProcess

    def apiserver_flags(self) -> tuple[str, ...]:
        """The API server trusts the provider's ID tokens: users and groups get an `oidc:` prefix."""
        return (f"--oidc-issuer-url={self.issuer}", f"--oidc-client-id={CLIENT_ID}",
                f"--oidc-ca-file={self.ca_file}", "--oidc-username-claim=sub", "--oidc-username-prefix=oidc:",
                "--oidc-groups-claim=groups", "--oidc-groups-prefix=oidc:")

    def stop(self) -> None:
        self.process.stop()


def start(directory: Path, redirect_uri: str, accounts: dict[str, list[str]],
          ttls: dict[str, dict[str, int]] | None = None) -> OidcProvider:
    """`accounts`: login -> groups; `ttls`: login -> {"idTokenTtl": s, "refreshTokenTtl": s} (default 1 h and
    14 days)."""
    home = install_dir()
    shutil.copyfile(SOURCE / "server.mjs", home / "server.mjs")
    ca_file, cert_file, key_file, spki = _tls(directory)
    port = free_port()
    issuer = f"https://127.0.0.1:{port}"
    secret = secrets.token_urlsafe(24)
    secret_file = directory / "oidc-client.secret"
    secret_file.write_text(secret)
    secret_file.chmod(0o600)
    config = {"port": port, "issuer": issuer, "cert": str(cert_file), "key": str(key_file),
              "jwk": _jwk(rsa.generate_private_key(public_exponent=65537, key_size=2048)),
              "client": {"id": CLIENT_ID, "secret": secret, "redirectUri": redirect_uri},
              "accounts": {name: {"groups": groups, **(ttls or {}).get(name, {})} for name, groups in accounts.items()}}
    config_file = directory / "oidc-provider.json"
    config_file.write_text(json.dumps(config))
    config_file.chmod(0o600)
    proc = ManagedProcess("oidc-provider", ["node", str(home / "server.mjs"), str(config_file)],
                          directory / "oidc-provider.log")
    proc.start()
    context = ssl.create_default_context(cafile=str(ca_file))
    deadline = time.monotonic() + 60
    while True:
        if not proc.alive():
            raise RuntimeError(f"oidc-provider exited:\n{proc.log_tail()}")
        try:
            if httpx.get(f"{issuer}/.well-known/openid-configuration", verify=context, timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"oidc-provider not ready:\n{proc.log_tail()}")
        time.sleep(0.2)
    return OidcProvider(issuer, ca_file, spki, secret_file, proc)
