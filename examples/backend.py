#!/usr/bin/env python3
"""Tiny web gears for trying gearlb by hand: `python3 examples/backend.py 9001 9002 9003`.

Each port answers every GET with a line naming the port, so you can see which backend
served a request. Stop with Ctrl-C.
"""
import http.server
import socketserver
import sys
import threading


def handler_for(port):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            body = f"hello from backend {port} path={self.path}\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    return Handler


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ports = [int(p) for p in sys.argv[1:]] or [9001, 9002, 9003]
    servers = [Server(("127.0.0.1", p), handler_for(p)) for p in ports]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print("backends on", ", ".join(f"127.0.0.1:{p}" for p in ports), "- Ctrl-C to stop")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
