"""Wire schemas shared by the routes: strict request bases, pages, problem documents, common params."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Generic, TypeVar

from fastapi import Header, Query
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict
from pydantic_core import PydanticCustomError

from backend.billing.money import parse_money_text

# Names of SSH keys and volumes: printable, no leading/trailing blanks, no control characters.
DISPLAY_NAME_PATTERN = r"^[^\x00-\x20\x7f]([^\x00-\x1f\x7f]{0,126}[^\x00-\x20\x7f])?$"

Item = TypeVar("Item")
_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")


def _date_time_text(value: object) -> object:
    if isinstance(value, str) and _NUMBER.fullmatch(value):
        raise ValueError("expected an RFC 3339 date-time such as 2026-01-31T00:00:00Z")
    return value


# Dates the backend can add its longest durations to (365 days of ttl, 90 of a term, a month of billing)
# and convert to UTC without leaving Python's years 1-9999: an overflow there was a 500, now a 422 here.
EARLIEST_DATE_TIME = datetime(2, 1, 1, tzinfo=UTC)
LATEST_DATE_TIME = datetime(9000, 1, 1, tzinfo=UTC)


def _date_time_in_range(value: datetime) -> datetime:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)  # naive: refused later
    if not EARLIEST_DATE_TIME <= aware < LATEST_DATE_TIME:
        raise PydanticCustomError(
            "date_time_out_of_range",
            "must be from {earliest} and before {latest}",
            {"earliest": "0002-01-01T00:00:00Z", "latest": "9000-01-01T00:00:00Z"},
        )
    return value


DateTimeInRange = AfterValidator(_date_time_in_range)
# A `date-time` query parameter, as documented: pydantic alone would also read "0.5" as Unix seconds.
DateTimeText = Annotated[datetime, BeforeValidator(_date_time_text), DateTimeInRange]


def money_text(decimal_places: int) -> BeforeValidator:
    """Money fields of request bodies (with `Strict(False)`): a JSON number, or a plain decimal string
    with up to `decimal_places` decimals; pydantic alone would also take "1e3" and " 5"."""

    def check(value: object) -> object:
        if not isinstance(value, str):
            return value
        try:
            return parse_money_text(value, decimal_places=decimal_places)
        except ValueError as error:
            # The text goes in as context: braces in what was sent are not a template.
            raise PydanticCustomError("money_format", "{reason}", {"reason": str(error)}) from None

    return BeforeValidator(check)


# `Field(json_schema_extra=WRITE_ONLY)`: a secret the API takes and never gives back (a password, a private
# key); audit records of every write replace it (`backend.api.writes`), OpenAPI marks it `writeOnly`.
WRITE_ONLY: dict[str, Any] = {"writeOnly": True}


class StrictModel(BaseModel):
    """Request bodies: unknown fields are rejected, not ignored, and every value must have its documented
    JSON type (no "10" for 10, no true for 1, no 1.0 for an integer, no "yes" for true). Decimal fields
    opt out with `Strict(False)`: they take a JSON number or a decimal string, as documented."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Page(BaseModel, Generic[Item]):
    """One page of a listing; pass `next_page_token` back as `page_token` for the next (null: last)."""

    items: list[Item]
    next_page_token: str | None


class ProblemFieldError(BaseModel):
    field: str
    code: str
    message: str


class Problem(BaseModel):
    """RFC 9457 problem document with a stable machine `code` and the offending `field`."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    code: str
    detail: str
    field: str | None = None
    errors: list[ProblemFieldError] = []
    request_id: str | None = None


def problem_response_doc(description: str) -> dict[str, Any]:
    # backend.api.openapi moves the schema under application/problem+json.
    return {"description": description, "model": Problem}


READ_ERRORS: dict[int | str, dict[str, Any]] = {
    400: problem_response_doc("Malformed request (bad JSON, bad page token, bad header)"),
    401: problem_response_doc("Missing, malformed, unknown or revoked API key"),
    404: problem_response_doc("No such resource in this project"),
    413: problem_response_doc("Request body too large"),
    422: problem_response_doc("Invalid input; `field` names the offending field"),
    429: problem_response_doc("Rate limit exceeded; see Retry-After"),
}
WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    **READ_ERRORS,
    403: problem_response_doc("The API key's role may not write"),
    409: problem_response_doc("Conflicts with the current state"),
    412: problem_response_doc("If-Match does not match the current ETag"),
}

PageSize = Annotated[int | None, Query(ge=1, le=200, description="Items per page (default 50)")]
PageToken = Annotated[
    str | None,
    Query(
        max_length=512,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Token from a previous page's `next_page_token`",
    ),
]
NameFilter = Annotated[
    str | None,
    Query(max_length=128, pattern=DISPLAY_NAME_PATTERN, description="Only items with exactly this name"),
]
IfMatch = Annotated[
    str | None,
    Header(alias="If-Match", max_length=256, description="Only act if the resource's current ETag is listed"),
]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=255,
        description="Makes a POST safe to retry: the same key and body replay the first response (24 h)",
    ),
]
