"""The lossy proxy itself (:mod:`support.lossy_proxy`), in front of a small real HTTP server:
message ends by ``Content-Length`` and by chunks, ``Expect: 100-continue``, keep-alive, and a
lost answer that the server did send (reset or closed, as chosen)."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from support.lossy_proxy import LossyProxy


class _Echo(BaseHTTPRequestHandler):
    """Answers every PUT with the body it got, in chunks; records each body."""

    protocol_version = "HTTP/1.1"
    bodies: list[bytes] = []
    lock = threading.Lock()

    def do_PUT(self) -> None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b""):
                        pass
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with self.lock:
            self.bodies.append(body)
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        half = len(body) // 2
        for part in (body[:half], body[half:]):
            if part:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # connections the proxy resets on closing are expected


@pytest.fixture
def upstream() -> Iterator[str]:
    server = _Server(("127.0.0.1", 0), _Echo)
    _Echo.bodies = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def test_bodies_of_both_kinds_pass_on_one_kept_alive_connection(upstream: str) -> None:
    with LossyProxy(upstream) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", _port(proxy.endpoint), timeout=30)
        conn.request("PUT", "/a", body=b"plain body", headers={"Expect": "100-continue"})
        assert conn.getresponse().read() == b"plain body"
        conn.request("PUT", "/b", body=iter([b"chunk", b"ed ", b"body"]), encode_chunked=True)
        assert conn.getresponse().read() == b"chunked body"
        conn.close()
    assert _Echo.bodies == [b"plain body", b"chunked body"]
    assert proxy.requests == ["PUT /a HTTP/1.1", "PUT /b HTTP/1.1 [chunked]"]


@pytest.mark.parametrize("how", ["reset", "close"])
def test_a_lost_answer_was_sent_by_the_server_and_never_reaches_the_client(
    upstream: str, how: str
) -> None:
    with LossyProxy(upstream) as proxy:
        rule = proxy.lose_response_of("PUT", "/lose", headers={"X-Pick": "me"}, how=how)
        conn = http.client.HTTPConnection("127.0.0.1", _port(proxy.endpoint), timeout=30)
        conn.request("PUT", "/lose", body=b"unpicked")  # no X-Pick header: passes
        assert conn.getresponse().read() == b"unpicked"
        conn.request("PUT", "/lose", body=b"landed", headers={"X-Pick": "me"})
        with pytest.raises((ConnectionResetError, http.client.RemoteDisconnected)):
            conn.getresponse().read()
        conn.close()
        assert rule.lost.is_set() and rule.status == 200
        again = http.client.HTTPConnection("127.0.0.1", _port(proxy.endpoint), timeout=30)
        again.request("PUT", "/lose", body=b"after", headers={"X-Pick": "me"})
        assert again.getresponse().read() == b"after"  # the rule fired once
        again.close()
    assert _Echo.bodies == [b"unpicked", b"landed", b"after"]
