"""mission_weave/runtime/daphne_frames.py, in a fresh interpreter that has loaded daphne's server
as a daphne process has: autobahn's per-frame log helpers hand their argument back, and
outside a daphne process nothing is patched."""

import subprocess
import sys

PATCHED = """
import daphne.server  # what a daphne process has loaded before the app
from autobahn.websocket import protocol
from mission_weave.runtime import daphne_frames
daphne_frames.install()
daphne_frames.install()  # once is enough; again changes nothing
assert protocol.hltype(protocol.WebSocketProtocol.sendData) is protocol.WebSocketProtocol.sendData
assert protocol.hlval(42) == 42
print("patched")
"""

ALONE = """
from autobahn.websocket import protocol
original = protocol.hltype
from mission_weave.runtime import daphne_frames
daphne_frames.install()
assert protocol.hltype is original
print("untouched")
"""


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_in_a_daphne_process_frames_format_no_log_line():
    assert run(PATCHED) == "patched"


def test_elsewhere_autobahn_is_left_as_it_is():
    assert run(ALONE) == "untouched"
