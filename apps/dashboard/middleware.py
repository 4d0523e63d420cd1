"""Pages and the admin refuse a parameter holding U+0000 before any view reads it:
PostgreSQL text cannot hold or compare it, so a lookup by such a value would fail in the
database (a 5xx) instead of saying what is wrong. The API judges its own parameters and
bodies (PROTOCOL error codes) and is left to do so."""

from django.shortcuts import render

NUL = "\x00"


def unstorable_field(request) -> str | None:
    """The name of the first query or form field whose name or value holds U+0000."""
    for data in (request.GET, request.POST):
        for name, values in data.lists():
            if NUL in name or any(NUL in value for value in values):
                return name.replace(NUL, "\\u0000")
    return None


class RefuseNulMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        field = None if request.path_info.startswith("/api/") else unstorable_field(request)
        if field is None:
            return self.get_response(request)
        return render(request, "dashboard/bad_request.html", {"refused": {
            "code": "VALIDATION_ERROR", "details": {"field": field},
            "message": f"the field “{field}” contains the character U+0000, which cannot be "
                       "stored or searched for"}}, status=400)
