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


# --- MONGODB-X509 ---------------------------------------------------------------------------
# The subject of jstests/libs/client.pem; MongoDB prints it as CLIENT_NAME below (jstests'
# ssl/x509 tests), the last RDN first.
X509_SUBJECT = "/C=US/ST=New York/L=New York City/O=MongoDB/OU=KernelUser/CN=client"
X509_USER = "CN=client,OU=KernelUser,O=MongoDB,L=New York City,ST=New York,C=US"


@pytest.fixture(scope="module")
def x509_certs(certs):
    """Two more client certificates signed by the test CA: one named as MongoDB's test client,
    one (CN=stranger, with an escaped comma) that no user has."""
    for name, subj in [("x509", X509_SUBJECT), ("stranger", "/O=A\\, B/CN=stranger")]:
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", subj, cwd=certs)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", "client.ext",
                cwd=certs)
        (certs / f"{name}.pem").write_text((certs / f"{name}.crt").read_text() +
                                           (certs / f"{name}.key").read_text())
    return certs


def x509_client(server, certs, cert):
    ca = str(certs / "ca.pem")
    uri = (f"mongodb://{HOST}:{server.port}/?authMechanism=MONGODB-X509&tls=true"
           f"&tlsCAFile={ca}&tlsCertificateKeyFile={certs / cert}&directConnection=true")
    return MongoClient(uri, serverSelectionTimeoutMS=10000)


def test_x509_authentication(start_nidus, x509_certs):
    certs = x509_certs
    ca = str(certs / "ca.pem")
    server = start_nidus(
        extra_args=tls_args(certs, ca=True, allow_without=True) + ["--auth"],
        client_options={"tls": True, "tlsCAFile": ca})
    anon = server.client(tlsCertificateKeyFile=str(certs / "x509.pem"), maxPoolSize=1)
    anon.admin.command("createUser", "admin", pwd="pw", roles=["root"])
    admin = MongoClient(f"mongodb://admin:pw@{HOST}:{server.port}/?tls=true&tlsCAFile={ca}"
                        f"&directConnection=true", serverSelectionTimeoutMS=10000)
    try:
        ext = admin["$external"]
        # $external users have no password (MongoDB's createUser checks).
        with pytest.raises(OperationFailure) as e:
            ext.command("createUser", X509_USER, pwd="x", roles=[])
        assert (e.value.code, e.value.details["errmsg"]) == (
            2, "Cannot set the password for users defined on the '$external' database")
        ext.command("createUser", X509_USER, roles=[{"role": "readWrite", "db": "test"}])
        info = ext.command("usersInfo", X509_USER)["users"][0]
        assert info["user"] == X509_USER and info["db"] == "$external"
        assert info["mechanisms"] == ["external"]
        before = admin.admin.command("serverStatus")["security"]["authentication"]["mechanisms"][
            "MONGODB-X509"]

        # pymongo: speculative authentication in hello.
        c = x509_client(server, certs, "x509.pem")
        try:
            c.test.c.insert_one({"_id": 1})
            assert c.test.c.find_one() == {"_id": 1}
            status = c.admin.command("connectionStatus")["authInfo"]["authenticatedUsers"]
            assert status == [{"user": X509_USER, "db": "$external"}]
            with pytest.raises(OperationFailure) as e:
                c.other.c.insert_one({})
            assert e.value.code == 13
        finally:
            c.close()
        after = admin.admin.command("serverStatus")["security"]["authentication"]["mechanisms"][
            "MONGODB-X509"]
        assert after["speculativeAuthenticate"]["successful"] > before["speculativeAuthenticate"]["successful"]
        assert after["authenticate"]["successful"] > before["authenticate"]["successful"]

        # The authenticate command by hand, on a TLS connection that presented x509.pem.
        reply = anon["$external"].command("authenticate", 1, mechanism="MONGODB-X509")
        assert reply["user"] == X509_USER and reply["dbname"] == "$external"
        assert anon.test.c.count_documents({}) == 1
        anon.admin.command("logout")
        # Naming the user is allowed when it is the certificate's subject ...
        anon["$external"].command("authenticate", 1, mechanism="MONGODB-X509", user=X509_USER)
        anon.admin.command("logout")
        # ... anything else fails as AuthenticationFailed; another database is a ProtocolError
        # (MongoDB's CmdAuthenticate passes ProtocolError and UserNotFound through).
        for kw in [{"mechanism": "MONGODB-X509", "user": "CN=someone"}, {"mechanism": "PLAIN"}]:
            with pytest.raises(OperationFailure) as e:
                anon["$external"].command("authenticate", 1, **kw)
            assert (e.value.code, e.value.details["errmsg"]) == (18, "Authentication failed.")
        with pytest.raises(OperationFailure) as e:
            anon.admin.command("authenticate", 1, mechanism="MONGODB-X509")
        assert (e.value.code, e.value.details["codeName"], e.value.details["errmsg"]) == (
            17, "ProtocolError", "X.509 authentication must always use the $external database.")
        assert "No verified subject name" not in server.log_text()

        # A certificate no user is named after: UserNotFound with MongoDB's message.
        stranger = server.client(tlsCertificateKeyFile=str(certs / "stranger.pem"))
        try:
            with pytest.raises(OperationFailure) as e:
                stranger["$external"].command("authenticate", 1, mechanism="MONGODB-X509")
            assert (e.value.code, e.value.details["errmsg"]) == (
                11, 'Could not find user "CN=stranger,O=A\\, B" for db "$external"')
        finally:
            stranger.close()
        # No client certificate at all.
        bare = server.client()
        try:
            with pytest.raises(OperationFailure) as e:
                bare["$external"].command("authenticate", 1, mechanism="MONGODB-X509")
            assert e.value.code == 18
            assert "No verified subject name available from client" in server.log_text()
            # The speculative form fails silently: no field in the reply.
            hello = bare.admin.command("hello", speculativeAuthenticate={
                "authenticate": 1, "mechanism": "MONGODB-X509", "db": "$external"})
            assert "speculativeAuthenticate" not in hello
        finally:
            bare.close()
        # Speculative authenticate with the certificate: the reply names the user.
        spec_conn = server.client(tlsCertificateKeyFile=str(certs / "x509.pem"), maxPoolSize=1)
        try:
            hello = spec_conn.admin.command("hello", speculativeAuthenticate={
                "authenticate": 1, "mechanism": "MONGODB-X509"})
            assert hello["speculativeAuthenticate"] == {"user": X509_USER, "dbname": "$external"}
            assert spec_conn.test.c.count_documents({}) == 1
        finally:
            spec_conn.close()
        # pymongo with a certificate that has no user: the login fails.
        c = x509_client(server, certs, "stranger.pem")
        with pytest.raises(OperationFailure) as e:
            c.test.c.find_one()
        assert e.value.code == 11
        c.close()
    finally:
        anon.close()
        admin.close()


def test_mongosh_x509_login(start_nidus, x509_certs, tmp_path):
    """The Node.js driver (mongosh) logs in with MONGODB-X509 too."""
    import os

    from test_mongosh import find_mongosh
    certs = x509_certs
    ca = str(certs / "ca.pem")
    server = start_nidus(extra_args=tls_args(certs, ca=True) + ["--auth"],
                         client_options={"tls": True, "tlsCAFile": ca,
                                         "tlsCertificateKeyFile": str(certs / "x509.pem")})
    setup = server.client()  # the localhost exception creates the first user
    try:
        setup.admin.command("createUser", "admin", pwd="pw", roles=["root"])
    finally:
        setup.close()
    admin = MongoClient(f"mongodb://admin:pw@{HOST}:{server.port}/?tls=true&tlsCAFile={ca}"
                        f"&tlsCertificateKeyFile={certs / 'x509.pem'}&directConnection=true",
                        serverSelectionTimeoutMS=10000)
    admin["$external"].command("createUser", X509_USER, roles=[{"role": "readWrite", "db": "app"}])
    admin.close()
    exe = find_mongosh()
    cfg = tmp_path / ".mongodb" / "mongosh"
    cfg.mkdir(parents=True)
    (cfg / "config").write_text('{"enableTelemetry": false, "disableGreetingMessage": true}')
    uri = (f"mongodb://{HOST}:{server.port}/app?authMechanism=MONGODB-X509&tls=true"
           f"&tlsCAFile={ca}&tlsCertificateKeyFile={certs / 'x509.pem'}"
           "&directConnection=true&serverSelectionTimeoutMS=10000")
    env = {**os.environ, "HOME": str(tmp_path), "MONGOSH_NO_TELEMETRY": "1", "DO_NOT_TRACK": "1"}
    r = subprocess.run([exe, uri, "--quiet", "--eval",
                        "db.x.insertOne({a: 1}); print('N', db.x.countDocuments({})); "
                        "print('ME', db.runCommand({connectionStatus: 1}).authInfo.authenticatedUsers[0].user)"],
                       capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "N 1" in r.stdout and f"ME {X509_USER}" in r.stdout, r.stdout


def test_x509_disabled_by_authentication_mechanisms(start_nidus, x509_certs):
    certs = x509_certs
    ca = str(certs / "ca.pem")
    server = start_nidus(
        extra_args=tls_args(certs, ca=True) + ["--auth", "--setParameter",
                                               "authenticationMechanisms=SCRAM-SHA-1,SCRAM-SHA-256"],
        client_options={"tls": True, "tlsCAFile": ca,
                        "tlsCertificateKeyFile": str(certs / "x509.pem")})
    c = server.client(maxPoolSize=1)
    try:
        c.admin.command("createUser", "admin", pwd="pw", roles=["root"])
        with pytest.raises(OperationFailure) as e:
            c["$external"].command("authenticate", 1, mechanism="MONGODB-X509")
        assert (e.value.code, e.value.details["errmsg"]) == (18, "Authentication failed.")
        assert "x.509 authentication is disabled." in server.log_text()
    finally:
        c.close()
