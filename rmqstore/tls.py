"""Optional TLS for every gRPC endpoint: a server certificate, and mutual TLS with a CA.

Flags (every service takes the same three; environment variables give the defaults, so a
Helm chart can mount certificates and set ``RMQSTORE_TLS_*`` once for all containers):

``--tls-cert`` / ``--tls-key``  PEM certificate chain and private key of this service. The
                                server presents them; as a client the service presents them
                                to peers that ask for a client certificate.
``--tls-ca``                    PEM CA bundle. As a server: clients must present a
                                certificate signed by it (mutual TLS). As a client: the CA
                                the peer's server certificate must chain to.
``--tls-server-name``           name to check in the peer's certificate instead of the host
                                of the address (for certificates issued to a service name).

No flag set: plaintext, as before. A certificate without its key (or the reverse), or a
file that cannot be read, is a configuration error raised at start-up, never at first use.
"""

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

import grpc

ENV = {"tls_cert": "RMQSTORE_TLS_CERT", "tls_key": "RMQSTORE_TLS_KEY",
       "tls_ca": "RMQSTORE_TLS_CA", "tls_server_name": "RMQSTORE_TLS_SERVER_NAME"}


def add_tls_flags(parser: argparse.ArgumentParser) -> None:
    """Add ``--tls-cert``, ``--tls-key``, ``--tls-ca`` and ``--tls-server-name``."""
    g = parser.add_argument_group("TLS (all optional; plaintext when none is given)")
    g.add_argument("--tls-cert", default=os.environ.get(ENV["tls_cert"], ""),
                   help=f"PEM certificate chain of this service (env {ENV['tls_cert']})")
    g.add_argument("--tls-key", default=os.environ.get(ENV["tls_key"], ""),
                   help=f"PEM private key of --tls-cert (env {ENV['tls_key']})")
    g.add_argument("--tls-ca", default=os.environ.get(ENV["tls_ca"], ""),
                   help="PEM CA bundle: clients must present a certificate it signed "
                        f"(mutual TLS), and peers' servers are checked against it "
                        f"(env {ENV['tls_ca']})")
    g.add_argument("--tls-server-name", default=os.environ.get(ENV["tls_server_name"], ""),
                   help="name expected in peers' server certificates, when it is not the "
                        f"host of the address (env {ENV['tls_server_name']})")


@dataclass(frozen=True)
class TlsFiles:
    """The PEM bytes named by the flags (empty when not given)."""

    cert: bytes = b""
    key: bytes = b""
    ca: bytes = b""
    server_name: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.cert or self.ca)


def _read(flag: str, path: str) -> bytes:
    if not path:
        return b""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f"{flag} {path}: cannot read it ({e.strerror})") from None
    if b"-----BEGIN " not in data:
        raise ValueError(f"{flag} {path}: not a PEM file")
    return data


def load(args: argparse.Namespace) -> TlsFiles:
    """Read and check the files the TLS flags name; raises ValueError on a bad setting."""
    cert_path = getattr(args, "tls_cert", "") or ""
    key_path = getattr(args, "tls_key", "") or ""
    if bool(cert_path) != bool(key_path):
        raise ValueError("--tls-cert and --tls-key go together: give both or neither")
    return TlsFiles(
        cert=_read("--tls-cert", cert_path),
        key=_read("--tls-key", key_path),
        ca=_read("--tls-ca", getattr(args, "tls_ca", "") or ""),
        server_name=getattr(args, "tls_server_name", "") or "",
    )


def server_credentials(args: argparse.Namespace) -> grpc.ServerCredentials | None:
    """Credentials for ``server.add_secure_port``; None means plaintext.

    A CA without a certificate is refused: a server cannot ask for client certificates
    without presenting its own.
    """
    tls = load(args)
    if not tls.cert:
        if tls.ca:
            raise ValueError("--tls-ca on a server needs --tls-cert and --tls-key as well")
        return None
    return grpc.ssl_server_credentials(
        [(tls.key, tls.cert)],
        root_certificates=tls.ca or None,
        require_client_auth=bool(tls.ca),
    )


def check_internal(args: argparse.Namespace) -> None:
    """Refuse TLS settings with which a service cannot reach the writer: a certificate (the
    servers speak TLS) without a CA leaves the service's own client with no way to check the
    writer's certificate, so every internal call would fail its handshake."""
    files = load(args)
    if files.cert and not files.ca:
        raise ValueError("--tls-cert without --tls-ca: the services' connections to the writer "
                         "could not check its certificate; give --tls-ca (the CA that signed "
                         "the services' certificates)")


def startup_client_check(args: argparse.Namespace) -> None:
    """``check_internal`` for a service starting: a bad setting is a ``StartupError``."""
    from rmqstore.startup import StartupError

    try:
        load(args)
        check_internal(args)
    except ValueError as e:
        raise StartupError(f"TLS: {e}") from None


def startup_server_credentials(args: argparse.Namespace) -> grpc.ServerCredentials | None:
    """``server_credentials`` for a service starting: a bad setting is a ``StartupError``."""
    from rmqstore.startup import StartupError

    try:
        return server_credentials(args)
    except ValueError as e:
        raise StartupError(f"TLS: {e}") from None


def add_port(server: grpc.Server, address: str, args: argparse.Namespace) -> int:
    """Bind ``address`` with TLS when the flags ask for it; returns the port (0 = failed)."""
    creds = server_credentials(args)
    if creds is None:
        return server.add_insecure_port(address)
    return server.add_secure_port(address, creds)


def channel_credentials(args: argparse.Namespace) -> grpc.ChannelCredentials | None:
    """Client credentials: the CA to check servers against and our own certificate."""
    tls = load(args)
    if not tls.enabled:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=tls.ca or None,
        private_key=tls.key or None,
        certificate_chain=tls.cert or None,
    )


def client_channel(address: str, args: argparse.Namespace,
                   options: list[tuple[str, object]] | None = None) -> grpc.Channel:
    """A channel to ``address``: TLS when the flags configure it, plaintext otherwise."""
    creds, opts = _client_settings(args, options)
    if creds is None:
        return grpc.insecure_channel(address, options=opts)
    return grpc.secure_channel(address, creds, options=opts)


def aio_client_channel(address: str, args: argparse.Namespace,
                       options: list[tuple[str, object]] | None = None) -> grpc.aio.Channel:
    """``client_channel`` for ``grpc.aio``: create it on the event loop that will use it."""
    creds, opts = _client_settings(args, options)
    if creds is None:
        return grpc.aio.insecure_channel(address, options=opts)
    return grpc.aio.secure_channel(address, creds, options=opts)


def _client_settings(
    args: argparse.Namespace, options: list[tuple[str, object]] | None
) -> tuple[grpc.ChannelCredentials | None, list[tuple[str, object]]]:
    from rmqstore.server import CHANNEL_OPTIONS

    opts = list(CHANNEL_OPTIONS if options is None else options)
    creds = channel_credentials(args)
    name = load(args).server_name if creds is not None else ""
    if name:
        opts.append(("grpc.ssl_target_name_override", name))
    return creds, opts
