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

from s3_checks import POST_V2_FIELDS, SIGV2_REFUSED, Refused


@dataclass(frozen=True)
class UploadForm:
    fields: dict[str, str]  # name (lower case, unique) -> value
    file_name: str
    file_size: int


def read_upload_form(environ: dict[str, Any], body: bytes) -> UploadForm:
    """Parse `body` (the whole request body) as werkzeug will for moto; Refused if ambiguous."""
    from werkzeug.formparser import parse_form_data

    if environ.get("HTTP_CONTENT_ENCODING"):
        raise Refused("InvalidArgument", "a POST upload may not carry Content-Encoding", 400)
    copy = dict(environ)
    copy["wsgi.input"] = io.BytesIO(body)
    copy["CONTENT_LENGTH"] = str(len(body))
    _, form, files = parse_form_data(copy)
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
    stream = upload.stream
    stream.seek(0, io.SEEK_END)
    size = stream.tell()
    return UploadForm({name: form[name] for name in form}, upload.filename or "", size)
