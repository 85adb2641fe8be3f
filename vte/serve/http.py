"""HTTP pieces every protocol of `python -m vte.serve` shares: the one error shape, the
JSON Content-Type rule, and a request body read with a size limit and a timeout."""

from __future__ import annotations

import asyncio
from typing import Sequence

from fastapi import Request
from fastapi.responses import JSONResponse

MAX_BODY_BYTES = 16 * 1024 * 1024     # default request-size limit (a 4096-node cluster is ~4 MB)
BODY_TIMEOUT_S = 30.0                 # default time for a request's body to arrive


def error(status_code: int, kind: str, loc: Sequence, msg: str) -> JSONResponse:
    """An error answer in the one documented shape (`schemas.ErrorResponse`)."""
    return JSONResponse(status_code=status_code,
                        content={"detail": [{"type": kind, "loc": list(loc), "msg": msg}]})


def json_content(content_type: str | None) -> bool:
    """The Content-Type rule of `POST /schedule`: a JSON media type (`application/json`,
    as DECICE sends, or `application/<anything>+json`, any parameters such as a charset),
    or no Content-Type at all (the body is read as JSON). Anything else, `text/plain` or a
    form among them, is answered 415 before the body is read."""
    if content_type is None:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    kind, _, sub = media.partition("/")
    return kind == "application" and (sub == "json" or sub.endswith("+json"))


async def read_body(raw: Request, limit: int, timeout_s: float) -> bytes | JSONResponse:
    """The request body, or the error answer: 413 beyond `limit` bytes (told by
    Content-Length before reading, else counted while reading), 408 after `timeout_s`."""
    length = raw.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        return error(413, "too_large", ["body"],
                     f"the body is {int(length)} bytes: allowed at most {limit} "
                     "(--max-body-bytes)")
    chunks, size = [], 0

    async def read():
        nonlocal size
        async for chunk in raw.stream():
            size += len(chunk)
            if size > limit:
                return False
            chunks.append(chunk)
        return True

    try:
        complete = await asyncio.wait_for(read(), timeout_s)
    except asyncio.TimeoutError:
        return error(408, "timeout", ["body"],
                     f"the body did not arrive within {timeout_s:g} s (--body-timeout-s)")
    if not complete:
        return error(413, "too_large", ["body"],
                     f"the body exceeds {limit} bytes: allowed at most {limit} "
                     "(--max-body-bytes)")
    return b"".join(chunks)
