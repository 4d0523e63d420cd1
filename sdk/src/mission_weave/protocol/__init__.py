"""The wire-level protocol shared by the server and the SDK: canonical JSON,
Ed25519 signatures, error codes, timestamps. Plain Python, no Django."""
