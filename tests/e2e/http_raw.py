#!/usr/bin/env python3
"""http_raw.py - raw-socket probes of the gateway's limits, for tests/e2e/75_http_limits.sh.
curl cannot announce a body and then not send it, or trickle a request a byte at a time.

  http_raw.py early PORT 'HEADER: V' ... -> the status of a POST that announces a body
      (Content-Length among the headers) and sends none; fails unless the answer and the
      close both come within 1 s
  http_raw.py per_ip PORT LIMIT           -> LIMIT idle connections from 127.0.0.1; fails
      unless one more from there is closed unanswered while 127.0.0.2 is served, and
      127.0.0.1 is served again once one of its connections closes
  http_raw.py total PORT LIMIT            -> LIMIT idle connections; fails unless one more
      waits unanswered, and is answered once one of them closes
  http_raw.py trickle PORT head|body MIN MAX -> a request sent a byte every 0.2 s (its
      headers, or its body after whole headers); prints the seconds until the gateway
      closed the connection; fails unless that was after MIN s and within MAX s
Every failure is an AssertionError with what was seen; exit status 1.
"""
import socket
import sys
import time

HOST = "127.0.0.1"


def connect(port, source="127.0.0.1"):
    s = socket.socket()
    s.bind((source, 0))
    s.connect((HOST, port))
    return s


def read_all(s, timeout):
    """Bytes until the peer closes (or resets); raises socket.timeout after timeout s."""
    s.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def status_of(data):
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.") else None


def get_health(s):
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    return read_all(s, 5)


def early(port, *headers):
    s = connect(port)
    t0 = time.monotonic()
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               + "".join(h + "\r\n" for h in headers) + "\r\n").encode())
    try:
        data = read_all(s, 3)
    except socket.timeout:
        raise AssertionError("no answer and no close within 3 s of the headers (the body was announced, not sent)")
    dt = time.monotonic() - t0
    assert status_of(data), "not an HTTP answer: %r" % data[:200]
    assert dt < 1, "answered and closed after %.2f s" % dt
    print(status_of(data))


def per_ip(port, limit):
    held = [connect(port) for _ in range(limit)]
    time.sleep(0.3)  # let the gateway accept and count them
    extra = connect(port)
    try:
        data = get_health(extra)
    except (BrokenPipeError, ConnectionResetError):
        data = b""
    except socket.timeout:
        data = b"(neither an answer nor a close within 5 s)"
    assert data == b"", "connection %d from one address was not closed at once: %r" % (limit + 1, data[:80])
    other = get_health(connect(port, "127.0.0.2"))
    assert status_of(other), "a client at another address was not served: %r" % other[:80]
    held.pop().close()
    deadline = time.monotonic() + 3  # until the gateway has seen the close
    while True:
        try:
            again = get_health(connect(port))
        except (BrokenPipeError, ConnectionResetError):
            again = b""
        if status_of(again) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert status_of(again), "after one of its connections closed, 127.0.0.1 was not served: %r" % again[:80]
    print("connection %d from 127.0.0.1 closed unanswered; 127.0.0.2 served (%d); 127.0.0.1 served again (%d)"
          % (limit + 1, status_of(other), status_of(again)))


def total(port, limit):
    held = [connect(port, "127.0.0.%d" % (2 + i)) for i in range(limit)]
    time.sleep(0.3)
    extra = connect(port)
    extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    try:
        data = read_all(extra, 1)
        raise AssertionError("connection %d over the limit was answered: %r" % (limit + 1, data[:80]))
    except socket.timeout:
        pass
    held.pop().close()
    data = read_all(extra, 5)
    assert status_of(data), "connection %d was not served once a slot was free: %r" % (limit + 1, data[:80])
    print("connection %d waited unanswered, served (%d) once another closed" % (limit + 1, status_of(data)))


def trickle(port, part, min_s, max_s):
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"
    body = b'{"prompt": "' + b"a" * 180 + b'"}'
    s = connect(port)
    t0 = time.monotonic()
    if part == "body":
        s.sendall(head)
    slow = head + body if part == "head" else body
    s.settimeout(0.2)
    for i in range(len(slow)):
        try:
            s.send(slow[i:i + 1])
            s.recv(1)  # the pause: 0.2 s, unless the gateway answers or closes first
            break
        except socket.timeout:
            pass
        except (BrokenPipeError, ConnectionResetError):
            break
        assert time.monotonic() - t0 < max_s, "still open after %.1f s" % (time.monotonic() - t0)
    dt = time.monotonic() - t0
    assert min_s <= dt < max_s, "closed after %.1f s, not after %s s and within %s s" % (dt, min_s, max_s)
    assert i < len(slow) - 1, "the whole request went out before the gateway closed the connection"
    print("%.1f" % dt)


if __name__ == "__main__":
    cmd, port = sys.argv[1], int(sys.argv[2])
    try:
        if cmd == "early":
            early(port, *sys.argv[3:])
        elif cmd in ("per_ip", "total"):
            globals()[cmd](port, int(sys.argv[3]))
        elif cmd == "trickle":
            trickle(port, sys.argv[3], float(sys.argv[4]), float(sys.argv[5]))
        else:
            raise SystemExit("unknown probe %s" % cmd)
    except AssertionError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
