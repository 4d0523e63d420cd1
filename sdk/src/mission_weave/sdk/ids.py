"""UUIDv7 command ids (RFC 9562): time-ordered, so the server's index stays compact."""

import os
import time
import uuid


def uuid7() -> str:
    millis = time.time_ns() // 1_000_000
    value = (millis & (2**48 - 1)) << 80
    value |= int.from_bytes(os.urandom(10), "big") & ((1 << 80) - 1)
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return str(uuid.UUID(int=value))
