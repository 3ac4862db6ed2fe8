"""The HTTP core of the backend client: one pooled httpx.Client, and the retry policy around it.

Policy lives here; the transport only sends. A request is retried (tenacity) when repeating it cannot do
anything twice:
- the connection could not be made (nothing reached the server): any method;
- a timeout or broken connection, a 429/502/503/504 answer, or a 409 whose code says the server did
  nothing and asks for a retry (`RETRYABLE_CONFLICT_CODES`: its transaction kept deadlocking and was
  rolled back, or the first request with the same Idempotency-Key is still running, so a retry gets its
  replay): only for replayable requests, meaning GET/HEAD/OPTIONS/PUT/DELETE, PATCH (this API's PATCH
  carries absolute values) and a POST that carries an `Idempotency-Key` (the server replays the first
  outcome) or that the caller marks side-effect free. Any other 409 is the answer, never retried.
Waits honour `Retry-After` (capped at `max_retry_after`), otherwise exponential backoff with jitter.
The same request object, with the same Idempotency-Key, is sent on every attempt.

Cancellation (`cancelled`, or a view from `cancellable(event)`): once the event is set no request is sent
and no retry waited for, and a read in flight is abandoned at once (its answer no longer matters). A write
in flight is let finish (bounded by the request timeout), so its outcome is known rather than guessed.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

from provider.client._wire import dumps, error_from_response, event_data, loads, retry_after_seconds
from provider.client.errors import TLS_VERIFICATION_FAILED, ApiError, ServerError, TransportError

if TYPE_CHECKING:  # imported when a client is built: httpx (with rich and click) costs ~50 ms per launch,
    import ssl  # and Terraform starts the provider for schema and validation calls that need no client

    import httpx
    import tenacity

_log = logging.getLogger("provider.client")

RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
# 409 problem codes the backend answers with Retry-After for a request it did not carry out.
RETRYABLE_CONFLICT_CODES = frozenset({"conflict_retry", "idempotency_key_in_flight"})
_REPLAYABLE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "PATCH"})
_ABANDONABLE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})  # reads: nothing is lost by not waiting
CANCEL_CHECK_SECONDS = 0.05  # how often a read in flight looks at the cancellation event


def _not_sent(error: BaseException | None) -> bool:
    """A failure in which the request never left this process: safe to repeat for any method."""
    import httpx

    not_sent = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)
    return isinstance(error, not_sent)


def certificate_problem(error: BaseException | None) -> str | None:
    """Why the API's TLS certificate did not verify (`self-signed certificate`...), when that is what
    `error` (or an exception it wraps) is; None for any other failure."""
    import ssl

    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, ssl.SSLCertVerificationError):
            return str(getattr(error, "verify_message", None) or getattr(error, "reason", None) or error)
        if "CERTIFICATE_VERIFY_FAILED" in str(error):
            return str(error).rsplit("certificate verify failed: ", 1)[-1].split(" (_ssl")[0]
        error = error.__cause__ or error.__context__
    return None


def tls_failure(endpoint: str, problem: str, method: str, path: str) -> TransportError:
    """The error of a TLS verification failure: the endpoint, why, and how to make it trusted."""
    return TransportError(
        status=0, code=TLS_VERIFICATION_FAILED, method=method, path=path, may_have_arrived=False,
        detail=(
            f"TLS verification of the API's certificate at {endpoint} failed ({problem}). To trust a "
            "private CA or a self-signed certificate, set SSL_CERT_FILE to a PEM bundle holding it (or "
            "SSL_CERT_DIR to a directory of them); for a local backend without TLS, use an http:// endpoint"
        ),
    )


def _retryable_answer(response: httpx.Response) -> bool:
    """An answer that asks for the same request again (when replayable); only a 409's body is read."""
    if response.status_code in RETRYABLE_STATUSES:
        return True
    if response.status_code != 409 or "json" not in response.headers.get("content-type", ""):
        return False
    response.read()  # a streamed answer's problem document (small); kept for the error raised later
    try:
        document = loads(response.content)
    except ValueError:
        return False
    code = document.get("code") if isinstance(document, dict) else None
    return isinstance(code, str) and code in RETRYABLE_CONFLICT_CODES


# Environment variables that make httpx build its TLS context differently from its default.
_TLS_ENVIRONMENT = ("SSL_CERT_FILE", "SSL_CERT_DIR", "SSLKEYLOGFILE")
_default_tls_context: ssl.SSLContext | None = None


def tls_context() -> ssl.SSLContext:
    """The certificate-verifying TLS context httpx would build for a client in this environment.

    httpx builds one per client, and loading a CA bundle costs 30-45 ms in every provider launch that
    configures. The default one (certifi's bundle: none of `_TLS_ENVIRONMENT` set) is therefore built
    once per process and shared by its clients; a warm provider daemon builds it before it forks the
    launches (`provider.client.preload`). It holds public CA certificates only, nothing of any client's
    endpoint or key. An environment naming its own CA file or directory (or a key log) gets a fresh
    one, read from those files now, as httpx does."""
    import httpx

    global _default_tls_context
    if any(os.environ.get(name) for name in _TLS_ENVIRONMENT):
        return httpx.create_ssl_context()
    if _default_tls_context is None:
        _default_tls_context = httpx.create_ssl_context()
    return _default_tls_context


def _verification(scheme: str, transport: httpx.BaseTransport | None) -> ssl.SSLContext | bool:
    """What a client checks the API's certificate with. An injected transport brings its own. An
    http:// API is never reached over TLS (no redirect is followed; a proxy's own TLS has its own
    context), so it gets a verifying context that trusts no CA, instead of loading a bundle for
    nothing: were it ever used, verification would fail."""
    if transport is not None:
        return True
    if scheme == "https":
        return tls_context()
    import ssl

    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and check_hostname, no CA


class Cancelled(ApiError):
    """The caller's cancellation event was set while a request waited to be retried."""

    default_code = "cancelled"


@dataclass(frozen=True)
class ApiResponse:
    status: int
    body: Any
    headers: httpx.Headers

    @property
    def etag(self) -> str | None:
        etag: str | None = self.headers.get("etag")
        return etag


class HttpCore:
    """Sends requests to the API with authentication, retries and typed errors."""

    def __init__(
        self,
        endpoint: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        max_retries: int = 4,
        transport: httpx.BaseTransport | None = None,
        user_agent: str = "gpucloud-client",
        max_retry_after: float = 30.0,
        backoff_max: float = 8.0,
        cancelled: threading.Event | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        import httpx
        import tenacity

        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"endpoint must be an http:// or https:// URL, got {endpoint!r}")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if timeout <= 0:
            raise ValueError("timeout must be > 0 seconds")
        self.endpoint = endpoint.rstrip("/")
        self._has_api_key = bool(api_key)
        self._max_retries = max_retries
        self._max_retry_after = max_retry_after
        self._backoff = tenacity.wait_random_exponential(multiplier=0.25, max=backoff_max)
        self._cancelled = cancelled
        self._sleep_impl = sleep
        headers = {
            "User-Agent": user_agent,
            "Accept": "application/json, application/problem+json",
        }
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._http = httpx.Client(
            base_url=self.endpoint + "/",
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            verify=_verification(parts.scheme, transport),
            transport=transport,
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=16),
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        key = "<redacted>" if self._has_api_key else "<unset>"
        return f"{type(self).__name__}(endpoint={self.endpoint!r}, api_key={key})"

    def close(self) -> None:
        self._http.close()

    def cancellable(self, cancelled: threading.Event) -> Self:
        """A view of this client (same connection pool, settings and `cache_key`) whose requests stop as
        soon as `cancelled` is set, raising `Cancelled`."""
        view = copy.copy(self)
        view._cancelled = cancelled
        return view

    @property
    def cache_key(self) -> int:
        """The same for a client and its cancellable views: key per-client caches with it."""
        return id(self._http)

    def __enter__(self) -> HttpCore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- requests ----------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        idempotency_key: str | None = None,
        if_match: str | None = None,
        side_effect_free: bool = False,
    ) -> ApiResponse:
        """Send one logical request (retried per the policy) and return the parsed 2xx JSON response.

        Raises an `ApiError` subclass for any failure."""
        response = self._perform(method, path, params, json, idempotency_key, if_match, side_effect_free)
        try:
            body = loads(response.content)
        except ValueError:
            raise ServerError(
                status=response.status_code,
                code="malformed_response",
                detail="the API answered with a body that is not JSON",
                method=method.upper(),
                path=path,
            ) from None
        return ApiResponse(response.status_code, body, response.headers)

    def request_text(self, method: str, path: str, *, params: Mapping[str, Any] | None = None) -> str:
        """Like `request`, for endpoints answering plain text (generated files)."""
        return self._perform(method, path, params, None, None, None, False).text

    def stream_events(self, path: str, *, params: Mapping[str, Any] | None = None) -> Iterator[str]:
        """The data of each Server-Sent Event a GET answers with, as it arrives, until the server ends
        the stream. Retried like any GET until the answer starts; an error answer raises its `ApiError`
        before any event, a stream that breaks a `TransportError`. Closing the iterator (or leaving the
        loop over it) closes the connection."""
        import httpx

        response = self._perform("GET", path, params, None, None, None, False, event_stream=True)
        try:
            yield from event_data(response.iter_lines())
        except httpx.TransportError as exc:
            raise TransportError(
                status=0, detail=f"the stream from {self.endpoint} broke: {type(exc).__name__}: {exc}",
                method="GET", path=path,
            ) from exc
        finally:
            response.close()

    def _perform(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        json: Any,
        idempotency_key: str | None,
        if_match: str | None,
        side_effect_free: bool,
        *,
        event_stream: bool = False,
    ) -> httpx.Response:
        """Send and check; with `event_stream` the answer's body is left unread for the caller to
        stream (and close)."""
        method = method.upper()
        headers: dict[str, str] = {"Accept": "text/event-stream"} if event_stream else {}
        content: bytes | None = None
        if json is not None:
            content = dumps(json)
            headers["Content-Type"] = "application/json"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        if if_match is not None:
            headers["If-Match"] = if_match
        query = {k: _query_value(v) for k, v in (params or {}).items() if v is not None}
        request = self._http.build_request(
            method, path.lstrip("/"), params=query, content=content, headers=headers
        )
        replayable = method in _REPLAYABLE_METHODS or idempotency_key is not None or side_effect_free
        response = self._send_with_retries(request, replayable, event_stream)
        if response.status_code >= 400:
            response.read()  # a problem document, also when a stream was asked for
            response.close()
            raise error_from_response(response, method=method, path=path)
        return response

    def _send_with_retries(self, request: httpx.Request, replayable: bool, stream: bool) -> httpx.Response:
        import httpx
        import tenacity

        started = time.monotonic()

        def should_retry(state: tenacity.RetryCallState) -> bool:
            outcome = state.outcome
            if outcome is None:
                return False
            if outcome.failed:
                error = outcome.exception()
                if certificate_problem(error) is not None:
                    return False  # the same certificate fails the same way on every attempt
                if _not_sent(error):
                    return True
                return replayable and isinstance(error, httpx.TransportError)
            response: httpx.Response = outcome.result()
            return replayable and _retryable_answer(response)

        def wait(state: tenacity.RetryCallState) -> float:
            outcome = state.outcome
            if outcome is not None and not outcome.failed:
                after = retry_after_seconds(outcome.result())
                if after is not None:
                    return min(after, self._max_retry_after)
            return float(self._backoff(state))

        def before_sleep(state: tenacity.RetryCallState) -> None:
            outcome = state.outcome
            why = (
                type(outcome.exception()).__name__
                if outcome is not None and outcome.failed
                else f"HTTP {outcome.result().status_code}"
                if outcome is not None
                else "?"
            )
            if outcome is not None and not outcome.failed:
                outcome.result().close()  # an unread streamed answer holds its connection until closed
            delay = state.next_action.sleep if state.next_action else 0.0
            _log.info(
                "retrying %s %s after %s (attempt %d of %d, waiting %.1fs)",
                request.method,
                request.url.path,
                why,
                state.attempt_number,
                self._max_retries + 1,
                delay,
            )

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self._max_retries + 1),
            retry=should_retry,
            wait=wait,
            sleep=self._sleep,
            before_sleep=before_sleep,
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
            reraise=True,
        )
        left = [False]  # whether some attempt may have reached the API

        def attempt(request: httpx.Request, stream: bool) -> httpx.Response:
            try:
                return self._send_once(request, stream)
            except BaseException as error:
                left[0] = left[0] or not _not_sent(error)
                raise

        try:
            response: httpx.Response = retrying(attempt, request, stream)
        except httpx.TransportError as exc:
            if (problem := certificate_problem(exc)) is not None:
                raise tls_failure(self.endpoint, problem, request.method, request.url.path) from exc
            raise TransportError(
                status=0,
                detail=f"could not reach the API at {self.endpoint}: {type(exc).__name__}: {exc}",
                method=request.method,
                path=request.url.path,
                may_have_arrived=left[0],
            ) from exc
        _log.debug(
            "%s %s -> %d in %.0f ms (request id %s)",
            request.method,
            request.url.path,
            response.status_code,
            (time.monotonic() - started) * 1000,
            response.headers.get("x-request-id", "-"),
        )
        return response

    def _send_once(self, request: httpx.Request, stream: bool = False) -> httpx.Response:
        """One attempt. With a cancellation event, a read runs in a worker thread and is abandoned as soon
        as the event is set (a blocked socket read cannot be interrupted from another thread)."""
        cancelled = self._cancelled
        if cancelled is None:
            return self._http.send(request, stream=stream)
        if cancelled.is_set():
            raise Cancelled(status=0, detail="the operation was cancelled", method=request.method,
                            path=request.url.path)
        if request.method not in _ABANDONABLE_METHODS:
            return self._http.send(request, stream=stream)
        outcome: list[httpx.Response | BaseException] = []
        done = threading.Event()

        def send() -> None:
            try:
                outcome.append(self._http.send(request, stream=stream))
            except BaseException as error:  # handed to the caller's thread
                outcome.append(error)
            finally:
                done.set()

        threading.Thread(target=send, name="gpucloud-http", daemon=True).start()
        while not done.wait(CANCEL_CHECK_SECONDS):
            if cancelled.is_set():
                _log.debug("abandoning %s %s: cancelled", request.method, request.url.path)
                raise Cancelled(status=0, detail="the operation was cancelled", method=request.method,
                                path=request.url.path)
        result = outcome[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def _sleep(self, seconds: float) -> None:
        if self._cancelled is not None and self._cancelled.is_set():
            raise Cancelled(status=0, detail="the operation was cancelled")
        if self._sleep_impl is not None:
            self._sleep_impl(seconds)
        elif self._cancelled is not None:
            if self._cancelled.wait(seconds):
                raise Cancelled(status=0, detail="the operation was cancelled")
        else:
            time.sleep(seconds)

    # ---- pagination --------------------------------------------------------------------------------

    def iter_items(
        self, path: str, params: Mapping[str, Any] | None = None, *, page_size: int = 100
    ) -> Iterator[Any]:
        """Every item of a paginated listing (`{items, next_page_token}`), following page tokens."""
        query = dict(params or {})
        query["page_size"] = page_size
        seen: set[str] = set()
        while True:
            body = self.request("GET", path, params=query).body
            if isinstance(body, list):  # an unpaginated listing
                yield from body
                return
            if not isinstance(body, dict) or not isinstance(body.get("items"), list):
                raise ServerError(
                    status=200,
                    code="malformed_response",
                    detail="a listing without items",
                    method="GET",
                    path=path,
                )
            yield from body["items"]
            token = body.get("next_page_token")
            if not token:
                return
            if token in seen:
                raise ServerError(
                    status=200,
                    code="malformed_response",
                    detail="the listing repeats a page token",
                    method="GET",
                    path=path,
                )
            seen.add(token)
            query["page_token"] = token


def _query_value(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value
