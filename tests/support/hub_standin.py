"""A local stand-in for the parts of the Hugging Face Hub API that ``push_adapter`` uses.

Implements, for huggingface_hub 2.x, just enough for ``HfApi.create_repo(exist_ok=True)`` and
``HfApi.upload_folder`` to succeed:

* ``POST /api/repos/create``                         -> ``{"url": ...}``
* ``POST /api/validate-yaml``                        -> README front-matter check (always fine)
* ``POST /api/models/{ns}/{name}/preupload/{rev}``   -> every file ``uploadMode: "regular"``, so
  content travels base64-inline in the commit and neither LFS nor Xet storage is ever contacted
  (with hf_xet installed, upload_folder only opens a Xet upload for non-"regular" files)
* ``POST /api/models/{ns}/{name}/commit/{rev}``      -> ndjson commit; decoded files are recorded
* ``GET  /api/whoami-v2`` and ``GET /api/models/{ns}/{name}`` (repo_info after a 401 on create)
* ``GET  /api/agent-harnesses`` (huggingface_hub's user-agent registry; an empty one)

Every request is recorded (method, path, headers, JSON body) so tests can assert on exactly what
left the machine. ``fail`` makes one endpoint answer with an error, optionally echoing the
Authorization header back in the body, to prove the client never leaks it. ``delay`` makes one
endpoint answer late, as a stand-in starved of CPU does (huggingface_hub gives some requests,
such as the agent-harness registry, a few seconds at most).
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: object = None


class _Server(ThreadingHTTPServer):
    # listen() backlog: the default 5 can refuse connections while a starved server is slow to accept (a full test
    # run); a refused connection is retried by huggingface_hub with a logged warning, so the output would depend on load.
    request_queue_size = 64
    daemon_threads = True


@dataclass
class HubStandIn:
    """Threaded HTTP server on 127.0.0.1 (random port). Use as a context manager."""

    token: str | None = None  # when set, requests without "Bearer <token>" get 401
    fail: dict[str, tuple[int, str]] = field(default_factory=dict)  # endpoint kind -> (status, body)
    delay: dict[str, float] = field(default_factory=dict)  # endpoint kind -> seconds before answering
    requests: list[Recorded] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)  # committed path -> content
    commits: list[dict] = field(default_factory=list)  # commit headers (summary, description)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _make_handler(self))
        # Short poll interval: shutdown() waits up to one interval, which adds up across tests.
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "HubStandIn":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def paths(self) -> list[str]:
        return [f"{r.method} {r.path}" for r in self.requests]


_REPO = r"(?P<repo>[^/]+(?:/[^/]+)?)"
ROUTES = [
    ("whoami", "GET", re.compile(r"^/api/whoami-v2$")),
    ("agent-harnesses", "GET", re.compile(r"^/api/agent-harnesses$")),
    ("create", "POST", re.compile(r"^/api/repos/create$")),
    ("validate-yaml", "POST", re.compile(r"^/api/validate-yaml$")),
    ("preupload", "POST", re.compile(rf"^/api/models/{_REPO}/preupload/(?P<rev>[^/]+)$")),
    ("commit", "POST", re.compile(rf"^/api/models/{_REPO}/commit/(?P<rev>[^/]+)$")),
    ("repo_info", "GET", re.compile(rf"^/api/models/{_REPO}(?:/revision/(?P<rev>[^/]+))?$")),
]


def _make_handler(hub: HubStandIn):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # httpx keeps connections alive

        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def _read_body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                data = b""
                while True:
                    size = int(self.rfile.readline().strip() or b"0", 16)
                    if size == 0:
                        self.rfile.readline()
                        return data
                    data += self.rfile.read(size)
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _reply(self, status: int, payload: object) -> None:
            body = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _handle(self, method: str) -> None:
            raw = self._read_body()
            path = self.path.split("?", 1)[0]
            headers = {k.lower(): v for k, v in self.headers.items()}
            kind, match = None, None
            for name, verb, pattern in ROUTES:
                if verb == method and (m := pattern.match(path)):
                    kind, match = name, m
                    break
            body: object = raw
            if kind == "commit":
                body = [json.loads(line) for line in raw.splitlines() if line.strip()]
            elif raw and headers.get("content-type", "").startswith("application/json"):
                body = json.loads(raw)
            with hub._lock:
                hub.requests.append(Recorded(method, path, headers, body))

            if kind in hub.delay:
                time.sleep(hub.delay[kind])
            auth = headers.get("authorization")
            if kind in hub.fail:
                status, text = hub.fail[kind]
                # "{auth}" lets a test make the server echo the credential back, like a misbehaving proxy.
                self._reply(status, {"error": text.replace("{auth}", auth or "")})
                return
            if kind is None:
                self._reply(404, {"error": f"stand-in: no route for {method} {path}"})
                return
            # The agent-harness registry is public (fetched without credentials by huggingface_hub).
            if hub.token is not None and kind != "agent-harnesses" and auth != f"Bearer {hub.token}":
                self._reply(401, {"error": "Invalid username or password."})
                return
            self._reply(200, self._answer(kind, match, body))

        def _answer(self, kind: str, match: re.Match, body: object) -> object:
            if kind == "whoami":
                return {"type": "user", "name": "standin-user", "auth": {"accessToken": {"role": "write"}}}
            if kind == "agent-harnesses":
                return {"standardEnvVars": [], "harnesses": {}}
            if kind == "create":
                repo = "/".join(p for p in (body.get("organization"), body.get("name")) if p)
                return {"url": f"{hub.url}/{repo}", "name": repo, "id": repo}
            if kind == "validate-yaml":
                return {"errors": [], "warnings": []}
            if kind == "preupload":
                return {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None}
                                  for f in body["files"]]}
            if kind == "commit":
                with hub._lock:
                    for item in body:
                        if item["key"] == "header":
                            hub.commits.append(item["value"])
                        elif item["key"] == "file":
                            value = item["value"]
                            assert value["encoding"] == "base64"
                            hub.files[value["path"]] = base64.b64decode(value["content"])
                        else:  # lfsFile / deletedFile would mean we did not steer away from LFS/Xet
                            hub.files[f"<unexpected {item['key']}>"] = json.dumps(item).encode()
                repo = match.group("repo")
                return {"commitUrl": f"{hub.url}/{repo}/commit/{'a' * 40}", "commitOid": "a" * 40,
                        "pullRequestUrl": None, "success": True}
            if kind == "repo_info":
                repo = match.group("repo")
                return {"id": repo, "modelId": repo, "sha": "a" * 40, "private": False, "siblings": []}
            raise AssertionError(kind)

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        def do_PUT(self) -> None:
            self._handle("PUT")

    return Handler
