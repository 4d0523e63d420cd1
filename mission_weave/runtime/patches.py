"""Patches of other people's code, each checked against the versions it was written for.

A patch of daphne, twisted, autobahn or Django's internals relies on code that is not a
public interface: a new release may rename what it replaces, and the patch would then do
nothing, or the wrong thing, without a word. So every patch declares the range of each
package it was written for (`daphne>=4.1,<4.3`), and installing it calls `require` first:
outside the range the process stops with an error that names the package, the installed
version and the range. After checking a patch against a new release, widen its range.
"""

from importlib.metadata import PackageNotFoundError, version

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version


class UnsupportedVersion(RuntimeError):
    """A patch was about to be installed on a version it was not written for."""


def require(patch: str, package: str, written_for: str, installed: str | None = None) -> str:
    """Raise UnsupportedVersion unless `package` (its installed version, or `installed`
    when given) is within `written_for`, a PEP 440 range such as ">=4.1,<4.3". `patch`
    names what is being installed, for the message. Returns the version checked."""
    try:
        allowed = SpecifierSet(written_for)
    except InvalidSpecifier:
        raise ValueError(f"{patch}: {written_for!r} is not a version range") from None
    if installed is None:
        try:
            installed = version(package)
        except PackageNotFoundError:
            raise UnsupportedVersion(
                f"{patch} patches {package} and was written for {package}{written_for}, but "
                f"{package} is not installed") from None
    try:
        within = allowed.contains(Version(installed), prereleases=True)
    except InvalidVersion:
        within = False
    if not within:
        raise UnsupportedVersion(
            f"{patch} patches {package} and was written for {package}{written_for}, but "
            f"{package} {installed} is installed: check the patch against {package} "
            f"{installed} and widen its range, or install {package}{written_for}")
    return installed
