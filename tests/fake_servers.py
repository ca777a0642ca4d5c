"""Fake model servers for the sandbox's kubelet and process tests: a few lines of ``http.server``
run as a real process, speaking as much of ``neuronserve serve`` as a test needs."""

from __future__ import annotations

import textwrap

#: Answers every GET 200 (its readiness probe); as neuronserve, the first SIGTERM or SIGINT starts a
#: drain delay and a second signal ends it (exit 0). Given one SIGTERM, it serves on until SIGKILL.
DRAINING_SERVER = textwrap.dedent(
    """\
    import http.server, signal, sys, threading
    port = int(sys.argv[sys.argv.index("--port") + 1])
    signals = []

    def on_signal(number, frame):
        # As neuronserve: the first signal starts a drain delay, a second one ends it.
        signals.append(number)
        if len(signals) == 2:
            sys.exit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    class Ready(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", port), Ready)
    server.timeout = 0.05
    while True:
        server.handle_request()
    """
)
