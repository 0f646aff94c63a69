"""``python -m worker.http.probe [--config FILE] [PATH]``: exit 0 when the local worker's
``/healthz`` (or PATH) answers 200, else 1 (Docker reserves 2). For container health
checks.

The port is not written into the image: the probe loads the settings the way
``worker start`` does (the file, then ``WORKER_*`` variables, which a container's
health check inherits) and asks ``http.management.port`` when one is set, else
``http.port``, on the address the server listens on (a wildcard address means this
machine's loopback). Over TLS it does not verify the certificate: it asks whether the
process on this machine is alive, not who it is.
"""

from __future__ import annotations

import argparse
import http.client
import os
import ssl
import sys
from pathlib import Path

from worker.config import Settings, load
from worker.errors import ConfigError

TIMEOUT_SECONDS = 4.0
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def target(settings: Settings) -> tuple[str, int]:
    """The host and port a local probe asks."""
    host = _WILDCARDS.get(settings.http_host, settings.http_host)
    port = settings.http_management_port
    return host, settings.http_port if port < 0 else port


def probe(settings: Settings, path: str = "/healthz", timeout: float = TIMEOUT_SECONDS) -> int:
    """The status ``path`` answers on the local worker; raises OSError when none answers."""
    host, port = target(settings)
    if settings.http_tls_cert_file:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=context
        )
    else:
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    finally:
        connection.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.http.probe")
    parser.add_argument("--config", type=Path, default=os.environ.get("WORKER_CONFIG"))
    parser.add_argument("path", nargs="?", default="/healthz")
    args = parser.parse_args(argv)
    try:
        status = probe(load(args.config).settings, args.path)
    except ConfigError as exc:  # 1 too: Docker reserves 2
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    except (OSError, http.client.HTTPException) as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"unhealthy: {args.path} answered {status}", file=sys.stderr)
    return 0 if status == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
