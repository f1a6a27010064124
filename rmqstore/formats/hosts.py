"""Socket addresses as RocketMQ stores them: IPv4 = 4 B ip + int32 port, IPv6 = 16 B + int32.

Text form: ``1.2.3.4:10911`` or ``[2001:db8::1]:10911``. IPv4-mapped IPv6 counts as IPv4.
"""

import functools
import ipaddress
import struct
from typing import NamedTuple

from rmqstore.errors import InvalidArgumentError

_PORT = struct.Struct(">i")


class Host(NamedTuple):
    ip: bytes  # 4 or 16 bytes
    port: int

    @property
    def is_v6(self) -> bool:
        return len(self.ip) == 16

    def pack(self) -> bytes:
        return self.ip + _PORT.pack(self.port)

    def __str__(self) -> str:
        """Java's text form: IPv6 as eight uncompressed hex groups, ``[0:0:0:0:0:0:0:1]:p``."""
        return _text(self.ip, self.port)


@functools.lru_cache(maxsize=4096)  # a store sees few hosts, and every record names two
def _text(ip: bytes, port: int) -> str:
    if len(ip) == 16:
        groups = ":".join(f"{g:x}" for g in struct.unpack(">8H", ip))
        return f"[{groups}]:{port}"
    return f"{ipaddress.IPv4Address(ip)}:{port}"


def parse_host(text: str) -> Host:
    """Parse ``ip:port`` or ``[ipv6]:port``."""
    try:
        if text.startswith("["):
            addr_text, _, port_text = text[1:].partition("]:")
        else:
            addr_text, _, port_text = text.rpartition(":")
        addr = ipaddress.ip_address(addr_text)
        port = int(port_text)
    except ValueError as e:
        raise InvalidArgumentError(f"host {text!r} is not ip:port or [ipv6]:port") from e
    if not 0 <= port <= 65535:
        raise InvalidArgumentError(f"host {text!r}: port out of range")
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return Host(addr.packed, port)

