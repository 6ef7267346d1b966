"""A POST-policy upload's form, read once and the same way as the store behind the gate.

Why this exists: moto takes the object key from the form field named exactly
`key`, the body from the last file part, and a field named `file` as the
body. A checker that reads the form any other way (case-insensitive names,
the first of two values) checks one upload while moto stores another. So the
gate parses the very bytes moto will receive with the same parser
(werkzeug's), and refuses every form that two readers could read
differently: a field name twice (in any case), a field name that is not
all lower case (every name S3 and botocore use is), a file part not named
`file` or more than one, a non-file field named `file`, and a compressed body.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from scripts.s3_checks import POST_V2_FIELDS, SIGV2_REFUSED, Refused

# How much of the body the decoder takes at a time: fewer, larger steps cost less.
PARSE_BUFFER_BYTES = 1024 * 1024


@dataclass(frozen=True)
class UploadForm:
    fields: dict[str, str]  # name (lower case, unique) -> value
    file_name: str
    file_size: int


class _CountingSink(io.RawIOBase):
    """Where the file part's bytes go while the form is read: counted, not kept (moto reads
    the body itself). Cheaper than werkzeug's default, a temporary file past 500 KB."""

    def __init__(self) -> None:
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.size += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self.size if whence == io.SEEK_END else 0


def _parse(environ: dict[str, Any], body: bytes) -> tuple[Any, Any]:
    """(form, files) as werkzeug reads them; its multipart decoder, in 1 MiB reads."""
    from werkzeug.formparser import MultiPartParser
    from werkzeug.http import parse_options_header

    mimetype, options = parse_options_header(environ.get("CONTENT_TYPE", ""))
    boundary = options.get("boundary", "").encode("ascii", "replace")
    if mimetype != "multipart/form-data" or not boundary:
        raise Refused("InvalidArgument", "a POST upload must be multipart/form-data", 400)
    parser = MultiPartParser(
        stream_factory=lambda **_: _CountingSink(), buffer_size=PARSE_BUFFER_BYTES
    )
    try:
        return parser.parse(io.BytesIO(body), boundary, len(body))
    except ValueError as error:  # werkzeug's word for a malformed form
        raise Refused(
            "MalformedPOSTRequest", f"the POST form cannot be read: {error}", 400
        ) from None


def read_upload_form(environ: dict[str, Any], body: bytes) -> UploadForm:
    """Parse `body` (the whole request body) as werkzeug will for moto; Refused if ambiguous."""
    if environ.get("HTTP_CONTENT_ENCODING"):
        raise Refused("InvalidArgument", "a POST upload may not carry Content-Encoding", 400)
    form, files = _parse(environ, body)
    names = [name for name, _ in form.items(multi=True)]
    names += [name for name, _ in files.items(multi=True)]
    if any(name.lower() in POST_V2_FIELDS for name in names):
        raise Refused("AccessDenied", SIGV2_REFUSED)  # what S3 says of a SigV2 form
    seen: set[str] = set()
    for name in names:
        if name.lower() in seen:
            raise Refused("InvalidArgument", f"POST form field {name!r} is given twice", 400)
        seen.add(name.lower())
        if name != name.lower():
            raise Refused(
                "InvalidArgument",
                f"POST form field {name!r}: field names must be in lower case",
                400,
            )
    if "file" in form:
        raise Refused("InvalidArgument", "POST form field 'file' must be a file upload", 400)
    if list(files) != ["file"]:
        raise Refused(
            "InvalidArgument",
            "POST requires exactly one file upload per request, in the field 'file'.",
            400,
        )
    upload = files["file"]
    return UploadForm(
        {name: form[name] for name in form}, upload.filename or "", upload.stream.size
    )
