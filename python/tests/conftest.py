"""Shared fixtures: a small geometry, a temporary disk tier, the kvtier binary and the tiny GGUF."""
import os
import subprocess

import pytest

import kvtier


@pytest.fixture
def geometry():
    return kvtier.Geometry(num_layers=3, num_kv_heads=2, head_dim=8, dtype="f32", page_tokens=4)


@pytest.fixture
def tiny_gguf(tmp_path_factory):
    binary = os.environ.get("KVTIER_BINARY", "kvtier")
    path = tmp_path_factory.mktemp("model") / "tiny.gguf"
    subprocess.run([binary, "model", "make", "--preset", "tiny", "--out", str(path)], check=True,
                   stdout=subprocess.DEVNULL)
    return str(path)


def _free_port_outside_ephemeral_range():
    """A free loopback port outside the kernel's ephemeral range, where no outgoing connection takes it."""
    import random
    import socket

    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    candidates = [p for p in range(10000, 65536) if p < low or p > high]
    for _ in range(1000):
        port = random.choice(candidates)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free loopback port outside the ephemeral range")


def _served_by(port, pid):
    """Whether the redis-server answering on `port` is process `pid` (INFO's process_id)."""
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"INFO server\r\n")
            reply = b""
            while b"process_id:" not in reply or not reply.endswith(b"\r\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                reply += chunk
    except OSError:
        return False
    return f"\nprocess_id:{pid}\r".encode() in reply


def _start_redis(server, directory):
    """A redis-server on a free port, answering; None if it exited at start (its port was taken)."""
    import time

    port = _free_port_outside_ephemeral_range()
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(directory)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(500):
        if proc.poll() is not None:
            return None
        if _served_by(port, proc.pid):
            return proc, port
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"redis-server on port {port} did not answer")


@pytest.fixture
def redis_url(tmp_path):
    """A private redis-server on a free port (skipped where redis-server is not installed)."""
    import shutil

    server = shutil.which("redis-server", path="/usr/bin:" + os.environ.get("PATH", ""))
    if not server:
        pytest.skip("redis-server not installed (make deps)")
    started = None
    for _ in range(5):  # another process may take the port between its probe and the server's bind
        started = _start_redis(server, tmp_path)
        if started:
            break
    assert started, "redis-server exited at start five times"
    proc, port = started
    try:
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait()
