"""What the server process needs around Django: the multi-process daphne launcher
(serve.py), the pooled sync HTTP handler with its read deadlines (http_handler.py), the
rate limits (rate_limits.py), and the patches of daphne, twisted and autobahn
(daphne_blobs.py, daphne_frames.py, http_handler.py), each checked against the version
it was written for (patches.py)."""
