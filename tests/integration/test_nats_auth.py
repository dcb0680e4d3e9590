"""Tether on a NATS that asks who you are: TLS with client certificates (generated here),
users with passwords in the URL, nkey users, and the errors when any of it is wrong."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nkeys
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.apps.tools import app
from tests.conftest import ROOT
from tests.servers import configured_server
from tether import Client, Dispatcher, NatsConfig, Worker
from tether.errors import NatsUnavailableError
from tether.schemas import Names


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> Path:
    path.with_suffix(".key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


Key = ec.EllipticCurvePrivateKey


def _cert(
    name: str, key: Key, issuer: x509.Name, signer: Key, ca: bool = False, server: bool = False
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(signer, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it."""
    where = tmp_path_factory.mktemp("pki")
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tether test CA")])
    ca = _write(where / "ca.pem", ca_key, _cert("tether test CA", ca_key, ca_name, ca_key, ca=True))
    server_key, client_key = _key(), _key()
    server = _cert("nats", server_key, ca_name, ca_key, server=True)
    client = _cert("worker", client_key, ca_name, ca_key)
    return Pki(
        ca=ca,
        server_cert=_write(where / "server.pem", server_key, server),
        server_key=where / "server.key",
        client_cert=_write(where / "client.pem", client_key, client),
        client_key=where / "client.key",
    )


@pytest.fixture(scope="module")
def tls_server(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = (
        f'tls {{ cert_file: "{pki.server_cert}", key_file: "{pki.server_key}", '
        f'ca_file: "{pki.ca}", verify: true }}'
    )
    with configured_server(tmp_path_factory.mktemp("tls"), settings) as server:
        yield f"tls://{server.address}"


async def test_a_task_runs_end_to_end_over_tls_with_client_certificates(
    tls_server: str, pki: Pki, prefix: str
) -> None:
    config = NatsConfig(
        url=tls_server,
        names=Names(prefix=prefix),
        tls_ca=str(pki.ca),
        tls_cert=str(pki.client_cert),
        tls_key=str(pki.client_key),
    )
    async with Dispatcher(config), Worker(app, config), Client(config) as client:
        handle = await client.submit(["fast"])
        assert await handle.wait(timeout=20) == {"step": 0, "payload": None}


async def test_no_client_certificate_or_a_missing_file_is_a_clear_error(
    tls_server: str, pki: Pki
) -> None:
    with pytest.raises(NatsUnavailableError, match="cannot reach NATS"):
        async with Client(NatsConfig(url=tls_server, tls_ca=str(pki.ca))):
            pass
    with pytest.raises(NatsUnavailableError, match=r"the TLS CA file '/no/such/ca\.pem' does not"):
        async with Client(NatsConfig(url=tls_server, tls_ca="/no/such/ca.pem")):
            pass


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """An nkey user's seed file and public key."""
    user = nkeys.from_seed(_new_user_seed())
    path = tmp_path_factory.mktemp("nkey") / "user.nk"
    path.write_bytes(user.seed)
    return path, user.public_key.decode()


def _new_user_seed() -> bytes:
    return nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)


@pytest.fixture(scope="module")
def auth_server(seed: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = (
        "authorization { users: [\n"
        '  { user: "alice", password: "s3cret" }\n'
        f'  {{ nkey: "{seed[1]}" }}\n'
        "] }"
    )
    with configured_server(tmp_path_factory.mktemp("auth"), settings) as server:
        yield server.address


async def test_a_password_in_the_url_and_an_nkey_seed_both_sign_in(
    auth_server: str, seed: tuple[Path, str], prefix: str
) -> None:
    names = Names(prefix=prefix)
    by_password = NatsConfig(url=f"nats://alice:s3cret@{auth_server}", names=names)
    by_nkey = NatsConfig(url=f"nats://{auth_server}", names=names, nkey_seed=str(seed[0]))
    async with Dispatcher(by_password), Worker(app, by_nkey), Client(by_nkey) as client:
        assert await (await client.submit(["fast"])).wait(timeout=20) is not None


async def test_wrong_or_no_credentials_say_that_nats_refused_them(auth_server: str) -> None:
    for url in (f"nats://alice:wrong@{auth_server}", f"nats://{auth_server}"):
        with pytest.raises(NatsUnavailableError, match="refused the credentials") as refused:
            async with Client(NatsConfig(url=url)):
                pass
        assert "wrong" not in str(refused.value)  # a password is never printed


async def test_the_cli_takes_tls_options_and_their_variables(
    tls_server: str, pki: Pki, prefix: str
) -> None:
    cli = [sys.executable, "-m", "tether.cli"]
    where = ["--nats", tls_server, "--prefix", prefix]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TETHER_NATS_TLS_KEY": str(pki.client_key)}
    options = ["--tls-ca", str(pki.ca), "--tls-cert", str(pki.client_cert)]
    by_options = await _run([*cli, "provision", *where, *options], env)
    ca, cert = str(pki.ca), str(pki.client_cert)
    env_only = {**env, "TETHER_NATS_TLS_CA": ca, "TETHER_NATS_TLS_CERT": cert}
    by_variables = await _run([*cli, "ls", *where], env_only)
    without = await _run([*cli, "ls", *where], {**os.environ, "PYTHONPATH": str(ROOT)})

    assert by_options == (0, "") and by_variables == (0, "")
    assert without[0] == 2 and "cannot reach NATS" in without[1]


async def _run(command: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Exit code and stderr of a CLI run."""
    process = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, err.decode()
