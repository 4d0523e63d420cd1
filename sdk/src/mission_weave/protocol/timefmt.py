"""RFC 3339 UTC timestamps with `Z`, as the wire writes them."""

from datetime import UTC, datetime

UTC = UTC


def format_time(moment: datetime) -> str:
    """Whole seconds unless the moment has a fraction; always UTC with `Z`."""
    moment = moment.astimezone(UTC)
    text = moment.isoformat(timespec="microseconds" if moment.microsecond else "seconds")
    return text.replace("+00:00", "Z")


def parse_time(text: str) -> datetime:
    """Parse an RFC 3339 timestamp; raises ValueError unless it names its offset."""
    if not isinstance(text, str) or "T" not in text:
        raise ValueError("expected an RFC 3339 timestamp such as 2026-11-29T08:00:00Z")
    moment = datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError("the timestamp must carry `Z` or an offset")
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59:59-01:00 is after the last UTC moment
        raise ValueError("the timestamp is outside the years 1 to 9999 in UTC") from None
