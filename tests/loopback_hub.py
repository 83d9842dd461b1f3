"""A loopback stand-in for the Hugging Face Hub endpoints that `create_repo` + `upload_folder` call.

`LoopbackHub` serves HTTP on 127.0.0.1 (a free port, in a thread) and implements, for model, dataset and space
repos, the requests huggingface_hub 1.x/2.x sends:

- `POST /api/repos/create` (JSON: name, organization, type, sdk, visibility) → `{"url": ...}`, 409 if it exists;
- `POST /api/validate-yaml` (sent when a README.md is uploaded) → 400 if its front matter is not a YAML mapping;
- `POST /api/{type}s/{repo_id}/preupload/{revision}` → every file is a regular git blob (`uploadMode: "regular"`),
  so no LFS / Xet storage is involved and every byte travels in the commit itself;
- `POST /api/{type}s/{repo_id}/commit/{revision}` (ndjson: header, then `file` items with base64 content,
  `deletedFile` items) → `{"commitUrl", "commitOid"}`;
- `GET /api/{type}s/{repo_id}[/revision/{revision}]` → minimal repo info (id, sha, siblings, sdk, private).

It records what was committed: `hub.files(repo_id, repo_type="model") -> {path: bytes}`. With `token=...` it
answers 401 to requests that do not carry that bearer token, like the Hub does for a bad or missing token. With
`stalled_commits=N` it stands in for a Hub that stalls: the next N commits are read half-way and never answered (the
connection stays open until the hub stops), as when the Hub or a proxy hangs in the middle of an upload.

    with LoopbackHub() as hub:
        HfApi(endpoint=hub.endpoint, token="hf_test").create_repo("me/model")
"""

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

_FRONT_MATTER = re.compile(r"^---\s*\n(.*?)\n---\s*(?:\n|$)", re.DOTALL)
_REPO_PATH = re.compile(r"^/api/(?P<type>models|datasets|spaces)/(?P<repo_id>[^/]+/[^/]+)(?P<rest>/.*)?$")
_TYPE_FROM_PLURAL = {"models": "model", "datasets": "dataset", "spaces": "space"}
_URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}


class _Repo:
    def __init__(self, repo_id: str, repo_type: str, sdk: str | None, private: bool):
        self.repo_id = repo_id
        self.repo_type = repo_type
        self.sdk = sdk
        self.private = private
        self.files: dict[str, bytes] = {}
        self.commits: list[dict] = []

    @property
    def sha(self) -> str:
        return self.commits[-1]["oid"] if self.commits else "0" * 40


class LoopbackHub:
    """The Hub's repo-create / preupload / commit endpoints on 127.0.0.1, recording every upload."""

    def __init__(self, token: str | None = None, stalled_commits: int = 0):
        self.token = token
        self.stalled_commits = stalled_commits
        self._stopping = threading.Event()  # releases the stalled requests
        self.repos: dict[tuple[str, str], _Repo] = {}
        self.requests: list[tuple[str, str]] = []  # (method, path) in order, to check what a client did
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "LoopbackHub":
        # A short poll interval makes stop() return at once instead of after up to half a second.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="loopback-hub", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "LoopbackHub":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def files(self, repo_id: str, repo_type: str = "model") -> dict[str, bytes]:
        """Every file of the repo as committed so far: {path in repo: content}."""
        with self._lock:
            repo = self.repos.get((repo_type, repo_id))
            if repo is None:
                raise KeyError(f"No {repo_type} repo {repo_id!r} was created on the loopback hub.")
            return dict(repo.files)

    def repo(self, repo_id: str, repo_type: str = "model") -> _Repo:
        with self._lock:
            return self.repos[(repo_type, repo_id)]

    # ------------------------------------------------------------------ request handling

    def _handler_class(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output quiet
                pass

            def do_GET(self):
                hub._dispatch(self, "GET")

            def do_POST(self):
                hub._dispatch(self, "POST")

        return Handler

    def _dispatch(self, request: BaseHTTPRequestHandler, method: str) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        path = request.path.split("?", 1)[0]
        with self._lock:
            self.requests.append((method, path))
            stall = method == "POST" and "/commit/" in path and self.stalled_commits > 0
            self.stalled_commits -= stall
        if stall:
            request.rfile.read(length // 2)
            self._stopping.wait()  # never answers; the client has to give up by itself
            request.close_connection = True
            return
        body = request.rfile.read(length) if length else b""
        if self.token is not None and request.headers.get("Authorization") != f"Bearer {self.token}":
            return _reply(request, 401, {"error": "Invalid credentials in Authorization header"})
        try:
            if method == "POST" and path == "/api/repos/create":
                return self._create_repo(request, json.loads(body))
            if method == "POST" and path == "/api/validate-yaml":
                return self._validate_yaml(request, json.loads(body))
            match = _REPO_PATH.match(path)
            if match:
                repo_type = _TYPE_FROM_PLURAL[match["type"]]
                rest = match["rest"] or ""
                with self._lock:
                    repo = self.repos.get((repo_type, match["repo_id"]))
                if repo is None:
                    return _reply(request, 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                if method == "POST" and rest.startswith("/preupload/"):
                    return self._preupload(request, json.loads(body))
                if method == "POST" and rest.startswith("/commit/"):
                    return self._commit(request, repo, body)
                if method == "GET" and (rest == "" or rest.startswith("/revision/")):
                    return self._repo_info(request, repo)
            _reply(request, 404, {"error": f"The loopback hub does not implement {method} {path}"})
        except (ValueError, KeyError) as error:
            _reply(request, 400, {"error": f"Bad request: {error}"})

    def _create_repo(self, request, payload: dict) -> None:
        repo_type = payload.get("type") or "model"
        repo_id = f"{payload['organization']}/{payload['name']}" if payload.get("organization") else payload["name"]
        url = f"{self.endpoint}/{_URL_PREFIX[repo_type]}{repo_id}"
        with self._lock:
            if (repo_type, repo_id) in self.repos:
                # The Hub's 409 carries the URL too; `create_repo(exist_ok=True)` returns it.
                return _reply(request, 409, {"error": "You already created this repo", "url": url})
            self.repos[(repo_type, repo_id)] = _Repo(
                repo_id, repo_type, payload.get("sdk"), payload.get("visibility") == "private"
            )
        _reply(request, 200, {"url": url, "name": repo_id})

    def _validate_yaml(self, request, payload: dict) -> None:
        match = _FRONT_MATTER.match(payload["content"])
        try:
            metadata = yaml.safe_load(match[1]) if match else {}
        except yaml.YAMLError as error:
            return _reply(request, 400, {"errors": [{"message": f"Invalid YAML: {error}"}], "warnings": []})
        if metadata is not None and not isinstance(metadata, dict):
            return _reply(request, 400, {"errors": [{"message": "The metadata must be a mapping"}], "warnings": []})
        _reply(request, 200, {"errors": [], "warnings": []})

    def _preupload(self, request, payload: dict) -> None:
        files = [
            {"path": item["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None}
            for item in payload["files"]
        ]
        _reply(request, 200, {"files": files})

    def _commit(self, request, repo: _Repo, body: bytes) -> None:
        items = [json.loads(line) for line in body.splitlines() if line.strip()]
        if not items or items[0].get("key") != "header":
            raise ValueError("a commit starts with a header item")
        added: dict[str, bytes] = {}
        deleted: list[str] = []
        for item in items[1:]:
            value = item["value"]
            if item["key"] == "file":
                if value.get("encoding") != "base64":
                    raise ValueError(f"unsupported encoding for {value['path']}")
                added[value["path"]] = base64.b64decode(value["content"])
            elif item["key"] in ("deletedFile", "deletedFolder"):
                deleted.append(value["path"])
            else:
                # lfsFile would point at content stored elsewhere; preupload never asks for it.
                raise ValueError(f"the loopback hub stores regular files only, got {item['key']!r}")
        digest = hashlib.sha1(body).hexdigest()
        with self._lock:
            for path in deleted:
                repo.files = {
                    name: data for name, data in repo.files.items() if name != path and not name.startswith(path + "/")
                }
            repo.files.update(added)
            repo.commits.append({"oid": digest, "summary": items[0]["value"].get("summary"), "files": sorted(added)})
        url = f"{self.endpoint}/{_URL_PREFIX[repo.repo_type]}{repo.repo_id}/commit/{digest}"
        _reply(request, 200, {"commitUrl": url, "commitOid": digest, "pullRequestUrl": None})

    def _repo_info(self, request, repo: _Repo) -> None:
        with self._lock:
            info = {
                "id": repo.repo_id,
                "sha": repo.sha,
                "private": repo.private,
                "siblings": [{"rfilename": name} for name in sorted(repo.files)],
            }
            if repo.sdk:
                info["sdk"] = repo.sdk
        _reply(request, 200, info)


def _reply(request: BaseHTTPRequestHandler, status: int, payload: dict, headers: dict | None = None) -> None:
    data = json.dumps(payload).encode()
    request.send_response(status)
    request.send_header("Content-Type", "application/json")
    request.send_header("Content-Length", str(len(data)))
    for name, value in (headers or {}).items():
        request.send_header(name, value)
    request.end_headers()
    request.wfile.write(data)
