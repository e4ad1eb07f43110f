"""A client of the deltakv sidecar's HTTP API (standard library only).

    c = SidecarClient("http://127.0.0.1:8470", token_file="/etc/deltakv/token")
    rec = c.sync_and_wait("step-101", "/deltas/step-101")   # record of a sync that went live
    c.wait(c.verify("/ckpt/step-101"))                      # jobs: sync, verify, scrub
    c.status()["live_version"], c.healthy(), c.metrics()

Mutating calls (sync, verify, scrub) need the sidecar's bearer token: `token`, `token_file`
or the DELTAKV_TOKEN environment variable, as for the sidecar itself. An HTTP error answer
raises SidecarError (http_status, code, message, body); no connection is http_status 0. A job
that ends other than live or verified raises SyncFailed, which carries the job's `record`.
"""
from __future__ import annotations

import http.client
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Optional, Tuple

__all__ = ["SidecarClient", "SidecarError", "SyncFailed", "TERMINAL_STATES", "SUCCESS_STATES"]

#: Job states after which a job's record no longer changes (syncs: live, aborted, diverged;
#: verifies and scrubs: verified, diverged, failed).
TERMINAL_STATES = frozenset({"live", "aborted", "diverged", "verified", "failed"})
#: Terminal states that are a success: a sync went live, a verify or scrub found no difference.
SUCCESS_STATES = frozenset({"live", "verified"})

DEFAULT_URL = "http://127.0.0.1:8470"


class SidecarError(Exception):
    """A failed call to the sidecar.

    `http_status` is the HTTP status of the answer (0: no answer, e.g. connection refused or a
    timeout), `code` the sidecar's error code (e.g. "FAILED_PRECONDITION", "" if none),
    `message` the sidecar's error message (or a description of the failure) and `body` the raw
    answer body ("" if none).
    """

    def __init__(self, http_status: int, message: str, body: str = "", code: str = "") -> None:
        super().__init__(message)
        self.http_status: int = http_status
        self.message: str = message
        self.body: str = body
        self.code: str = code

    def __str__(self) -> str:
        if self.http_status == 0:
            return f"sidecar unreachable: {self.message}"
        code = f" {self.code}" if self.code else ""
        return f"HTTP {self.http_status}{code}: {self.message}"


class SyncFailed(SidecarError):
    """A job that finished in a state other than live or verified; `record` is its record.

    `http_status` is the status of the answer that carried the record (200).
    """

    def __init__(self, record: Dict[str, Any]) -> None:
        self.record: Dict[str, Any] = record
        state, job = record.get("state", "?"), record.get("id", "?")
        error = record.get("error", "")
        super().__init__(200, f"{record.get('kind', 'job')} {job} {state}"
                         + (f": {error}" if error else ""), json.dumps(record), code=str(state))

    @property
    def state(self) -> str:
        return str(self.record.get("state", ""))

    def __str__(self) -> str:
        return self.message


def _read_token_file(path: str) -> str:
    # As the sidecar reads its --token-file: one token, surrounding whitespace ignored.
    with open(path, encoding="utf-8") as f:
        token = f.read().strip(" \t\r\n")
    if not token:
        raise ValueError(f"token file '{path}' holds no token (empty or only whitespace)")
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in token):
        raise ValueError(f"token file '{path}' must hold one token on one line: a bearer token "
                         "cannot hold spaces, tabs, line breaks or control characters")
    return token


class SidecarClient:
    """Calls one sidecar at `url` ("http://host:port"); thread-safe (no shared connection).

    `token` (or `token_file`, read once here, or else $DELTAKV_TOKEN) authenticates syncs,
    verifies and scrubs; reads need none. `timeout` bounds each HTTP request, in seconds.
    Proxy settings of the environment are not used.
    """

    def __init__(self, url: str = DEFAULT_URL, *, token: Optional[str] = None,
                 token_file: Optional[str] = None, timeout: float = 30.0) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"sidecar url must be http(s)://host:port, not {url!r}")
        if token is not None and token_file is not None:
            raise ValueError("pass token or token_file, not both")
        if token_file is not None:
            token = _read_token_file(token_file)
        elif token is None:
            token = os.environ.get("DELTAKV_TOKEN") or None
        self.url: str = url.rstrip("/")
        self.timeout: float = timeout
        self._token: Optional[str] = token
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def __repr__(self) -> str:
        return f"SidecarClient({self.url!r})"

    # ---- jobs

    def sync(self, version: str, delta: str, **extra: Any) -> str:
        """Starts a sync to `version` from the delta at `delta` (a directory, file:// or
        http(s):// location); returns its id. `extra` fields are sent in the body as well."""
        return self._submit("/v1/sync", {"version": version, "delta": delta, **extra})

    def verify(self, checkpoint: str, *, rate_gbps: Optional[float] = None,
               **extra: Any) -> str:
        """Starts a verify of the live weights against `checkpoint`; returns its id.
        `rate_gbps` limits each rank's read rate (GB/s; None: unlimited)."""
        body: Dict[str, Any] = {"checkpoint": checkpoint, **extra}
        if rate_gbps is not None:
            body["rate_gbps"] = rate_gbps
        return self._submit("/v1/verify", body)

    def scrub(self, *, rate_gbps: Optional[float] = None, **extra: Any) -> str:
        """Starts a scrub (live weights against the checksum table); returns its id.
        `rate_gbps` limits each rank's read rate (None: the sidecar's --scrub-rate-gbps)."""
        body: Dict[str, Any] = dict(extra)
        if rate_gbps is not None:
            body["rate_gbps"] = rate_gbps
        return self._submit("/v1/scrub", body)

    def get_sync(self, sync_id: str) -> Dict[str, Any]:
        """The record of any job (sync, verify or scrub); SidecarError 404 if unknown."""
        return self._json("GET", "/v1/syncs/" + urllib.parse.quote(sync_id, safe=""))

    def wait(self, sync_id: str, timeout: float = 600, poll_interval: float = 0.05, *,
             raise_on_failure: bool = True) -> Dict[str, Any]:
        """Waits until a job is finished and returns its record.

        Each request is a long poll (GET /v1/syncs/ID?wait_ms=...): the sidecar answers as soon
        as the job ends, so the record comes back without polling delay; `poll_interval` is the
        pause between requests only after an answer that came early without the end (none with
        this sidecar). Raises SyncFailed if it ended other than live or verified (unless
        `raise_on_failure` is False) and TimeoutError if it has not finished after `timeout`
        seconds.
        """
        deadline = time.monotonic() + timeout
        path = "/v1/syncs/" + urllib.parse.quote(sync_id, safe="")
        while True:
            left = deadline - time.monotonic()
            # The sidecar waits at most 60 s per request; leave the HTTP timeout a margin.
            wait_s = max(0.0, min(left, self.timeout - 1.0, 60.0))
            t0 = time.monotonic()
            rec = self._json("GET", f"{path}?wait_ms={int(wait_s * 1000)}",
                             timeout=max(min(self.timeout, left + 1.0), 1.0))
            state = rec.get("state")
            if state in TERMINAL_STATES:
                if raise_on_failure and state not in SUCCESS_STATES:
                    raise SyncFailed(rec)
                return rec
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"job {sync_id} is still {state} after {timeout} s")
            if time.monotonic() - t0 < wait_s * 0.5:
                time.sleep(min(poll_interval, left))

    def sync_and_wait(self, version: str, delta: str, timeout: float = 600,
                      poll_interval: float = 0.05, *, raise_on_failure: bool = True,
                      **extra: Any) -> Dict[str, Any]:
        """sync() then wait(): the record of the finished sync."""
        return self.wait(self.sync(version, delta, **extra), timeout, poll_interval,
                         raise_on_failure=raise_on_failure)

    # ---- reads

    def status(self) -> Dict[str, Any]:
        """GET /v1/status: live_version, diverged, checksums, ranks, history."""
        return self._json("GET", "/v1/status")

    def healthy(self) -> bool:
        """True if /healthz answers 200; False on any error or no answer."""
        try:
            status, _ = self._request("GET", "/healthz")
        except SidecarError:
            return False
        return status == 200

    def metrics(self) -> str:
        """GET /metrics: Prometheus text."""
        return self._request("GET", "/metrics")[1]

    # ---- plumbing

    def _submit(self, path: str, body: Dict[str, Any]) -> str:
        answer = self._json("POST", path, body)
        job = answer.get("id")
        if not isinstance(job, str):
            raise SidecarError(202, f"POST {path}: the answer has no job id", json.dumps(answer))
        return job

    def _json(self, method: str, path: str, body: Optional[Dict[str, Any]] = None,
              timeout: Optional[float] = None) -> Dict[str, Any]:
        status, text = self._request(method, path, body, timeout)
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise SidecarError(status, f"{method} {path}: the answer is not a JSON object", text)
        return value

    def _request(self, method: str, path: str, body: Optional[Dict[str, Any]] = None,
                 timeout: Optional[float] = None) -> Tuple[int, str]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if method != "GET" and self._token:
            req.add_header("Authorization", "Bearer " + self._token)
        try:
            with self._opener.open(req, timeout=self.timeout if timeout is None else timeout) as r:
                return int(r.status), r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            try:
                text = e.read().decode("utf-8", "replace")
            except (OSError, http.client.HTTPException):
                text = ""
            finally:
                e.close()
            raise _http_error(e.code, text, f"{method} {path}: {e.reason}") from None
        except urllib.error.URLError as e:
            raise SidecarError(0, f"{method} {self.url}{path}: {e.reason}") from e
        except (OSError, http.client.HTTPException) as e:  # timeouts, resets, bad answers
            raise SidecarError(0, f"{method} {self.url}{path}: {e or type(e).__name__}") from e


def _http_error(status: int, text: str, fallback: str) -> SidecarError:
    """The sidecar answers errors as {"error": {"code": C, "message": M}}."""
    code, message = "", ""
    try:
        err = json.loads(text).get("error")
        if isinstance(err, dict):
            code, message = str(err.get("code", "")), str(err.get("message", ""))
    except (ValueError, AttributeError):
        pass
    return SidecarError(status, message or text.strip() or fallback, text, code)
