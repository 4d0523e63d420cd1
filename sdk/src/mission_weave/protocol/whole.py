"""Whole numbers as clients write them: ASCII digits, nothing else.

str.isdigit() also holds for '²' and '١', which int() refuses or reads as 2 and 1; and
int() refuses text of over 4,300 digits. Checked here, neither reaches int()."""


def whole_number(text: str, maximum: int) -> int | None:
    """`text` as an integer from 0 to `maximum` if it is plain ASCII digits, else None."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(maximum)):
        return None
    value = int(text)
    return value if value <= maximum else None
