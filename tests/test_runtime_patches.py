"""Every patch of daphne, twisted, autobahn or Django's internals declares the versions it
was written for, and installing it checks them (mission_weave/runtime/patches.py): an
upgrade outside the range stops the process with a message naming the package, the
installed version and the range, instead of a patch that silently does nothing."""

import subprocess
import sys
from importlib.metadata import version

import pytest

from mission_weave.runtime import daphne_blobs, daphne_frames, http_handler, patches
from mission_weave.runtime.patches import UnsupportedVersion

DECLARED = [
    ("mission_weave.runtime.daphne_blobs", daphne_blobs.WRITTEN_FOR),
    ("mission_weave.runtime.daphne_frames", daphne_frames.WRITTEN_FOR),
    ("install_read_deadlines", http_handler.READ_DEADLINES_WRITTEN_FOR),
    ("install_lean_requests", http_handler.LEAN_REQUESTS_WRITTEN_FOR),
    ("PooledSyncASGIHandler", http_handler.HANDLER_WRITTEN_FOR),
]


@pytest.mark.parametrize(("patch", "written_for"), DECLARED, ids=[d[0] for d in DECLARED])
def test_every_patch_was_written_for_the_versions_installed(patch, written_for):
    for package, versions in written_for.items():
        assert patches.require(patch, package, versions) == version(package)


def test_a_version_above_the_range_is_refused_naming_package_version_and_range():
    with pytest.raises(UnsupportedVersion) as refused:
        patches.require("mission_weave.runtime.daphne_blobs", "daphne", ">=4.1,<4.3",
                        installed="4.3.0")
    assert str(refused.value) == (
        "mission_weave.runtime.daphne_blobs patches daphne and was written for "
        "daphne>=4.1,<4.3, but daphne 4.3.0 is installed: check the patch against daphne "
        "4.3.0 and widen its range, or install daphne>=4.1,<4.3")


def test_a_version_below_the_range_is_refused_too():
    with pytest.raises(UnsupportedVersion, match=r"twisted 24\.3\.0 is installed"):
        patches.require("install_read_deadlines", "twisted", ">=26.10,<27", installed="24.3.0")


def test_a_version_within_the_range_passes_prereleases_of_the_bound_do_not():
    assert patches.require("p", "daphne", ">=4.1,<4.3", installed="4.2.99") == "4.2.99"
    with pytest.raises(UnsupportedVersion):
        patches.require("p", "daphne", ">=4.1,<4.3", installed="4.3.0rc1")


def test_a_package_not_installed_or_a_version_not_pep_440_is_refused():
    with pytest.raises(UnsupportedVersion, match="no-such-package is not installed"):
        patches.require("p", "no-such-package", ">=1")
    with pytest.raises(UnsupportedVersion, match="daphne not-a-version is installed"):
        patches.require("p", "daphne", ">=4.1,<4.3", installed="not-a-version")


OUTSIDE = """
import daphne.server  # what a daphne process has loaded before the app
from autobahn.websocket import protocol
original = protocol.hltype
from mission_weave.runtime import daphne_frames, patches
daphne_frames.WRITTEN_FOR = {"autobahn": "<1"}  # as if the installed one were too new
try:
    daphne_frames.install()
except patches.UnsupportedVersion as error:
    assert protocol.hltype is original  # nothing patched
    print(error)
"""


def test_installing_a_patch_on_a_version_outside_its_range_fails_and_patches_nothing():
    done = subprocess.run([sys.executable, "-c", OUTSIDE], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"mission_weave.runtime.daphne_frames patches autobahn and was written for "
        f"autobahn<1, but autobahn {version('autobahn')} is installed: check the patch "
        f"against autobahn {version('autobahn')} and widen its range, or install autobahn<1")
