"""Helpers shared by the Python benchmarks: HTTP calls that stop the bench on an error, and
figures that must be present and positive (a missing figure is an error, never 0)."""
import json, sys, time, urllib.error, urllib.request


class Bench:
    def __init__(self, name):
        self.name = name

    def http(self, method, url, body=None, token=None):
        req = urllib.request.Request(
            url, data=json.dumps(body).encode() if body is not None else None, method=method)
        if token:
            req.add_header("Authorization", "Bearer " + token)
        try:
            with urllib.request.urlopen(req, timeout=3600) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")[:500]
            sys.exit(f"{self.name}: {method} {url}: HTTP {e.code}: {text}")

    def figure(self, obj, key, what, zero_ok=False):
        """obj[key] as a positive number (or zero, with zero_ok), or exits naming what is
        missing."""
        v = obj.get(key) if isinstance(obj, dict) else None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            sys.exit(f"{self.name}: {what} has no {key!r}: {json.dumps(obj)[:500]}")
        if v < 0 or (v == 0 and not zero_ok):
            sys.exit(f"{self.name}: {what} reports {key}={v}, which cannot be a measurement")
        return v

    def wait_job(self, url, job_id, terminal):
        """Long-polls GET /v1/syncs/ID?wait_ms= until its state is one of `terminal`; returns the
        record. The sidecar answers when the job ends, so no polling adds CPU or delay."""
        while True:
            rec = self.http("GET", f"{url}/v1/syncs/{job_id}?wait_ms=10000")
            if rec.get("state") in terminal:
                return rec
