"""A throw-away CA and certificates signed by it, made with the ``openssl`` command.

One certificate serves as both the server's and the client's (``127.0.0.1`` and
``localhost`` in its subject alternative names), the way the members of a group share
one in a test. A second CA signs a certificate the group must refuse.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

_DAYS = "2"


@dataclass(frozen=True)
class Certificates:
    ca: Path
    cert: Path
    key: Path
    stranger_cert: Path  # signed by another CA
    stranger_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(directory: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", _DAYS,
        "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.pem",
        cwd=directory,
    )  # fmt: skip


def _leaf(directory: Path, name: str, ca: str) -> None:
    (directory / f"{name}.ext").write_text(
        "subjectAltName = IP:127.0.0.1, DNS:localhost\nextendedKeyUsage = serverAuth, clientAuth\n"
    )
    _openssl(
        "req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-days", _DAYS, "-extfile", f"{name}.ext", "-out", f"{name}.pem",
        cwd=directory,
    )  # fmt: skip


def make_certificates(directory: Path) -> Certificates:
    """A CA, a certificate it signed, and one a stranger CA signed; skips without openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    directory.mkdir(parents=True, exist_ok=True)
    _ca(directory, "ca")
    _leaf(directory, "member", "ca")
    _ca(directory, "stranger-ca")
    _leaf(directory, "stranger", "stranger-ca")
    return Certificates(
        directory / "ca.pem",
        directory / "member.pem",
        directory / "member.key",
        directory / "stranger.pem",
        directory / "stranger.key",
    )
