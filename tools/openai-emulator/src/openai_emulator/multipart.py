"""Reading the ``multipart/form-data`` body of ``files.create``.

The SDK sends the fields ``purpose`` (and ``expires_after[anchor]``,
``expires_after[seconds]`` when given) and the part ``file`` with a filename. Parsed by
hand over bytes, not with ``email``, because a batch input file may be 200 MB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import bad_request

_BOUNDARY = re.compile(r'boundary="?([^";]+)"?', re.IGNORECASE)
_DISPOSITION_PARAM = re.compile(r'(\w+)="([^"]*)"')


@dataclass
class FormData:
    fields: dict[str, str] = field(default_factory=dict)
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # name: (filename, data)


def parse_form(content_type: str, body: bytes) -> FormData:
    """The fields and files of a multipart body; 400 if it is not one."""
    if not content_type.lower().startswith("multipart/form-data"):
        raise bad_request("Uploads must be sent as multipart/form-data.")
    match = _BOUNDARY.search(content_type)
    if match is None:
        raise bad_request("The multipart/form-data Content-Type has no boundary.")
    delimiter = b"--" + match.group(1).encode()
    form = FormData()
    for chunk in body.split(delimiter)[1:]:
        if chunk.startswith(b"--"):
            break  # the closing delimiter
        head, separator, content = chunk.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        if not separator:
            raise bad_request("A multipart part has no header/body separator.")
        content = content.removesuffix(b"\r\n")
        disposition = ""
        for line in head.decode("utf-8", errors="replace").split("\r\n"):
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-disposition":
                disposition = value
        params = dict(_DISPOSITION_PARAM.findall(disposition))
        if "name" not in params:
            raise bad_request("A multipart part has no Content-Disposition name.")
        if "filename" in params:
            form.files[params["name"]] = (params["filename"], content)
        else:
            form.fields[params["name"]] = content.decode("utf-8", errors="replace")
    return form
