"""uvicorn's HTTP/1.1 protocol (h11) with its own error answers as problem+json.

A request h11 cannot parse (a bad or repeated Content-Length, a broken request line) never reaches the
app: uvicorn answers it with a plain-text 400. This subclass answers the same 400 as a problem document
with a request id, like every other error of the API, and still closes the connection.
"""

from __future__ import annotations

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from backend.api.middleware import new_request_id
from backend.api.problems import PROBLEM_MEDIA_TYPE, problem_body


class ProblemH11Protocol(H11Protocol):
    """H11Protocol whose answer to an unparsable request is a 400 problem+json."""

    def send_400_response(self, msg: str) -> None:
        request_id = new_request_id()
        body = problem_body(
            status=400,
            code="malformed_http_request",
            detail="the request is not valid HTTP/1.1 (check the request line and headers such as "
            "Content-Length)",
            request_id=request_id,
        )
        headers = [
            (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", request_id.encode()),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event))
        self.transport.close()
