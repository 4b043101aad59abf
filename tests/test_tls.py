"""TLS: --tlsMode requireTLS / preferTLS with certificates made here by the openssl CLI
(a CA, a server certificate for 127.0.0.1 and a client certificate, both signed by the CA)."""

from __future__ import annotations

import shutil
import socket
import subprocess

import pytest
from pymongo import MongoClient
from pymongo.errors import ConnectionFailure, OperationFailure

from nidus_harness import HOST


def openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.skip("the openssl CLI is not installed (needed to make test certificates)")
    d = tmp_path_factory.mktemp("tls")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=nidus test CA", cwd=d)
    for name, ext in [("server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"),
                      ("client", "extendedKeyUsage=clientAuth\n")]:
        (d / f"{name}.ext").write_text("basicConstraints=CA:FALSE\n" + ext)
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={name}", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=d)
        # mongod's PEM key files hold the certificate and the key together.
        (d / f"{name}.pem").write_text((d / f"{name}.crt").read_text() + (d / f"{name}.key").read_text())
    return d


def tls_args(certs, mode="requireTLS", ca=False, allow_without=False):
    args = ["--tlsMode", mode, "--tlsCertificateKeyFile", str(certs / "server.pem")]
    if ca:
        args += ["--tlsCAFile", str(certs / "ca.pem")]
    if allow_without:
        args.append("--tlsAllowConnectionsWithoutCertificates")
    return args


def plaintext_hello_answered(port) -> bool:
    """Sends an OP_MSG hello in plaintext; True when a reply comes back."""
    import bson
    body = bson.encode({"hello": 1, "$db": "admin"})
    payload = (0).to_bytes(4, "little") + b"\x00" + body
    header = (16 + len(payload)).to_bytes(4, "little") + (1).to_bytes(4, "little") + \
        (0).to_bytes(4, "little") + (2013).to_bytes(4, "little")
    with socket.create_connection((HOST, port), timeout=5) as s:
        s.sendall(header + payload)
        try:
            return len(s.recv(16)) == 16
        except (ConnectionResetError, socket.timeout):
            return False


def test_require_tls(start_nidus, certs):
    server = start_nidus(extra_args=tls_args(certs),
                         client_options={"tls": True, "tlsCAFile": str(certs / "ca.pem")})
    c = server.client()
    try:
        c.t.c.insert_one({"_id": 1, "over": "tls"})
        assert c.t.c.find_one() == {"_id": 1, "over": "tls"}
        opts = c.admin.command("getCmdLineOpts")["parsed"]["net"]["tls"]
        assert opts["mode"] == "requireTLS"
    finally:
        c.close()
    # Plaintext is refused: the connection closes without a reply.
    assert not plaintext_hello_answered(server.port)
    plain = MongoClient(HOST, server.port, directConnection=True, serverSelectionTimeoutMS=1500)
    with pytest.raises(ConnectionFailure):
        plain.admin.command("ping")
    plain.close()
    # A client that does not trust the server's CA fails the handshake.
    untrusting = MongoClient(HOST, server.port, directConnection=True, tls=True,
                             serverSelectionTimeoutMS=1500)
    with pytest.raises(ConnectionFailure):
        untrusting.admin.command("ping")
    untrusting.close()
    assert server.is_running()


def test_prefer_tls_accepts_both(start_nidus, certs):
    server = start_nidus(extra_args=tls_args(certs, mode="preferTLS"))
    plain = server.client()
    secure = server.client(tls=True, tlsCAFile=str(certs / "ca.pem"))
    try:
        plain.t.c.insert_one({"_id": "plain"})
        secure.t.c.insert_one({"_id": "tls"})
        assert sorted(d["_id"] for d in secure.t.c.find()) == ["plain", "tls"]
        assert plaintext_hello_answered(server.port)
    finally:
        plain.close()
        secure.close()


def test_client_certificates_checked_against_ca_file(start_nidus, certs):
    server = start_nidus(extra_args=tls_args(certs, ca=True),
                         client_options={"tls": True, "tlsCAFile": str(certs / "ca.pem"),
                                         "tlsCertificateKeyFile": str(certs / "client.pem")})
    c = server.client()
    try:
        assert c.admin.command("ping")["ok"] == 1
    finally:
        c.close()
    no_cert = MongoClient(HOST, server.port, directConnection=True, tls=True,
                          tlsCAFile=str(certs / "ca.pem"), serverSelectionTimeoutMS=1500)
    with pytest.raises(ConnectionFailure):
        no_cert.admin.command("ping")
    no_cert.close()


def test_tls_with_auth(start_nidus, certs):
    ca = str(certs / "ca.pem")
    server = start_nidus(extra_args=tls_args(certs) + ["--auth"], client_options={"tls": True, "tlsCAFile": ca})
    anon = server.client()
    try:
        anon.admin.command("createUser", "admin", pwd="pw", roles=["root"])
        with pytest.raises(OperationFailure) as e:
            anon.t.c.find_one()
        assert e.value.code == 13
    finally:
        anon.close()
    uri = f"mongodb://admin:pw@{HOST}:{server.port}/?authSource=admin&tls=true&tlsCAFile={ca}&directConnection=true"
    c = MongoClient(uri, serverSelectionTimeoutMS=10000)
    try:
        c.t.c.insert_one({"ok": 1})
        assert c.t.c.count_documents({}) == 1
    finally:
        c.close()
