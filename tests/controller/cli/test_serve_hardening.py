"""`tectl serve` as a process against a hostile or unlucky day: a forged log line in a
certificate name, rejected handshakes counted by reason, plaintext off loopback, a port
already taken."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from controller.api.fabric_te.v1 import te_pb2 as pb
from controller.api.fabric_te.v1 import te_pb2_grpc as pb_grpc
from controller.cli.main import main
from sim.processes import free_port

FORGED = 'x"}\n{"level": "critical", "message": "forged'


def _serve(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "controller.cli.main", "serve", "--fabric", "tiny", "--grace",
         "1", "--store", "memory", *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM, wait, and the whole of stderr."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return proc.stderr.read() if proc.stderr else ""


def _records(text: str) -> list[dict[str, object]]:
    """Every line of `text` as a JSON object (the test fails on the first that is not)."""
    out = []
    for line in text.splitlines():
        record = json.loads(line)
        assert isinstance(record, dict), line
        out.append(record)
    return out


def _metric(port: int, name: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {labels: float(v) for labels, v in re.findall(rf"^{name}\{{(.*)\}} (\S+)$", text, re.M)}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from controller.service.certs import make_cert

    d = tmp_path_factory.mktemp("certs")
    assert main(["certs", str(d)]) == 0
    other = tmp_path_factory.mktemp("other")
    assert main(["certs", str(other)]) == 0
    ca = (x509.load_pem_x509_certificate((d / "ca.pem").read_bytes()),
          serialization.load_pem_private_key((d / "ca.key").read_bytes(), None))  # fmt: skip
    (d / "forged").mkdir()
    make_cert(d / "forged", FORGED, ca)  # a CN holding a quote, a newline and a fake record
    for ext in ("pem", "key"):
        (d / f"forged.{ext}").write_bytes((d / "forged" / f"{FORGED}.{ext}").read_bytes())
        (d / f"foreign.{ext}").write_bytes((other / f"reader.{ext}").read_bytes())
    return d


def _channel(port: int, d: Path, who: str | None) -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(
        (d / "ca.pem").read_bytes(),
        (d / f"{who}.key").read_bytes() if who else None,
        (d / f"{who}.pem").read_bytes() if who else None,
    )
    return grpc.secure_channel(f"localhost:{port}", creds)


def test_log_is_json_per_line_cannot_be_forged_and_handshakes_are_counted(certs: Path) -> None:
    port, metrics = free_port(), free_port()
    proc = _serve("--listen", f"127.0.0.1:{port}", "--metrics-port", str(metrics),
                  "--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key"),
                  "--tls-client-ca", str(certs / "ca.pem"),
                  "--policy", str(certs / "policy.yaml"))  # fmt: skip
    try:
        reader = _channel(port, certs, "reader")
        grpc.channel_ready_future(reader).result(timeout=60)
        forged = pb_grpc.TrafficEngineeringStub(_channel(port, certs, "forged"))
        with pytest.raises(grpc.RpcError) as denied:
            forged.Status(pb.StatusRequest(), timeout=10)
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        # rejected handshakes: what the client sees, and what /metrics counts
        rejected = {
            "no_client_certificate": _channel(port, certs, None),
            "untrusted_certificate": _channel(port, certs, "foreign"),
            "wrong_purpose": _channel(port, certs, "server"),
            "not_tls": grpc.insecure_channel(f"127.0.0.1:{port}"),
        }
        for channel in rejected.values():
            with pytest.raises(grpc.RpcError) as err:
                health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                          timeout=5)  # fmt: skip
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            channel.close()
        name = "fabric_te_tls_handshake_failures_total"
        deadline = time.monotonic() + 20
        while True:
            counts = _metric(metrics, name)
            if all(counts.get(f'reason="{r}"', 0) >= 1 for r in rejected):
                break
            assert time.monotonic() < deadline, counts
            time.sleep(0.2)
        assert counts['reason="other"'] == 0
    finally:
        text = _stop(proc)
    records = _records(text)  # every line of the log is one JSON object
    assert not [r for r in records if str(r.get("level")).lower() == "critical"]
    denials = [r for r in records if r.get("message") == "permission denied"]
    assert denials and denials[0]["identity"] == f"CN={FORGED}"
    assert any(r.get("logger") == "grpc" and "Handshake failed" in str(r.get("message"))
               for r in records)  # fmt: skip
    assert not any("fork() handlers" in str(r.get("message")) for r in records)


def test_plaintext_off_loopback_needs_a_second_flag(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    assert main(["serve", "--fabric", "tiny", "--insecure", "--listen", f"0.0.0.0:{port}"]) == 2
    err = capsys.readouterr().err
    assert "--insecure-remote" in err and "0.0.0.0" in err
    assert main(["serve", "--fabric", "tiny", "--insecure-remote", "--listen", "127.0.0.1:0"]) == 2
    assert "--insecure" in capsys.readouterr().err  # alone it widens nothing
    proc = _serve("--insecure", "--insecure-remote", "--listen", f"0.0.0.0:{port}",
                  "--metrics-port", "0")  # fmt: skip
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=60)
        channel.close()
    finally:
        text = _stop(proc)
    warnings = [r for r in _records(text) if r.get("level") == "warning"
                and "plaintext" in str(r.get("message"))]  # fmt: skip
    assert warnings and "NOT loopback" in str(warnings[0]["message"])


def test_port_in_use_is_one_line_and_exit_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _serve("--insecure", "--listen", f"127.0.0.1:{port}", "--metrics-port", "0")
        assert proc.wait(timeout=60) == 2
        text = proc.stderr.read() if proc.stderr else ""
    assert "Traceback" not in text
    errors = [r for r in _records(text) if "cannot listen" in str(r.get("message"))]
    assert len(errors) == 1
    assert f"127.0.0.1:{port}" in str(errors[0]["message"])
    assert "in use" in str(errors[0]["message"])
    # refused before an engine started: it took no lead, solved and pushed nothing
    assert not [r for r in _records(text) if "leader" in str(r.get("message"))]


def test_every_input_and_every_push_is_one_log_record() -> None:
    """An operator reads what came in and what went out: an accepted input is one record
    (its store key, state version) and a push is one (operations, switches, ok, seconds)."""
    port = free_port()
    proc = _serve("--listen", f"127.0.0.1:{port}", "--insecure", "--metrics-port", "0")
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=60)
        stub = pb_grpc.TrafficEngineeringStub(channel)
        hosts = ["host-p0-r0-h0", "host-p0-r1-h0", "host-p1-r0-h0", "host-p1-r1-h0"]
        stub.PutJob(pb.PutJobRequest(job=pb.Job(id="logged", hosts=hosts, tp=1)), timeout=30)
        deadline = time.monotonic() + 60
        while stub.Status(pb.StatusRequest(), timeout=10).pending_changes:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        channel.close()
    finally:
        text = _stop(proc)
    records = _records(text)
    accepted = [r for r in records if r.get("message") == "input accepted"]
    assert accepted and accepted[0]["key"] == "jobs/logged" and accepted[0]["state_version"] == 1
    pushes = [r for r in records if r.get("message") == "pushed"]
    assert pushes and pushes[0]["ok"] is True and int(str(pushes[0]["operations"])) > 0


def test_a_port_held_only_by_connections_of_a_dead_process_can_be_served() -> None:
    """After a kill -9 the server side of its connections sits in TIME_WAIT for a minute:
    gRPC binds over it (SO_REUSEADDR), so the probe must too, or a restart is refused with
    'Address already in use' until they expire; a live listener is still refused."""
    from controller.service.server import listen_problem

    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC's listener
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert listen_problem(f"127.0.0.1:{port}") is not None  # live: refused
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = server.accept()
        conn.close()  # the server closes first: its side goes to TIME_WAIT
        client.close()
    assert listen_problem(f"127.0.0.1:{port}") is None


@pytest.mark.parametrize(("flags", "message"), [
    (["--driver", "file", "--lab", "x"], "--lab does not apply to --driver file (it takes "
                                         "--driver-dir)"),
    (["--driver", "emulated", "--driver-dir", "x"], "--driver-dir does not apply to --driver "
                                                    "emulated"),
    (["--driver", "linux"], "--driver linux needs --lab"),
    (["--driver", "nosuch"], "--driver: unknown driver 'nosuch'; known: "),
])  # fmt: skip
def test_driver_flags_are_checked_against_the_driver_before_anything_starts(
    flags: list[str], message: str
) -> None:
    """A flag the driver has no option for, a required one missing, an unknown driver: one
    line naming the flags, exit 2, before a store, an engine or a listener is made (it was
    'bad options: FileDriver.__init__() got an unexpected keyword argument', exit 1)."""
    proc = _serve("--insecure", "--listen", "127.0.0.1:0", "--metrics-port", "0", *flags)
    assert proc.wait(timeout=60) == 2
    text = proc.stderr.read() if proc.stderr else ""
    assert message in text and "Traceback" not in text and "__init__" not in text


def test_certs_refuse_a_validity_of_no_days(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """`--days 0` wrote certificates valid for minutes (the clock-skew margin)."""
    with pytest.raises(SystemExit) as done:
        main(["certs", str(tmp_path / "c"), "--days", "0"])
    assert done.value.code == 2 and "0 is not within [1, 3650]" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
