"""A loopback stand-in for the Hugging Face Hub: the endpoints that `create_repo` + `upload_folder` call, and the
ones that `snapshot_download` / `hf_hub_download` / `from_pretrained` read.

`LoopbackHub` serves HTTP on 127.0.0.1 (a free port, in a thread) and implements, for model, dataset and space
repos, the requests huggingface_hub 1.x/2.x sends:

- `POST /api/repos/create` (JSON: name, organization, type, sdk, visibility) → `{"url": ...}`, 409 if it exists;
- `POST /api/validate-yaml` (sent when a README.md is uploaded) → 400 if its front matter is not a YAML mapping;
- `POST /api/{type}s/{repo_id}/preupload/{revision}` → every file is a regular git blob (`uploadMode: "regular"`),
  so no LFS / Xet storage is involved and every byte travels in the commit itself;
- `POST /api/{type}s/{repo_id}/commit/{revision}` (ndjson: header, then `file` items with base64 content,
  `deletedFile` items) → `{"commitUrl", "commitOid"}`;
- `GET /api/{type}s/{repo_id}[/revision/{revision}]` → repo info (id, sha, siblings; with `blobs=true` each
  sibling's blobId, size and lfs), as at that revision;
- `GET /api/{type}s/{repo_id}/tree/{revision}[/{folder}][?recursive=true]` → the files (and folders) at a revision;
- `GET /api/{type}s/{repo_id}/commits/{revision}` → the commits reaching it, newest first;
- `GET /api/{type}s/{repo_id}/discussions[?author=&type=&status=]` → the repo's pull requests (one page);
- `HEAD`/`GET /[{type}s/]{repo_id}/resolve/{revision}/{path}` → the file, with `X-Repo-Commit`, `ETag` (the git blob
  id) and, for weights (stored in LFS on the Hub), `X-Linked-Etag` (their sha256) and `X-Linked-Size`;
- `GET /api/whoami-v2` → the account of the bearer token (`add_account`), 401 for any other token.

It is also the Hub's OpenID Connect provider, as "Sign in with Hugging Face" uses it (`add_oauth_app`: the OAuth app
the Hub makes for a Space with `hf_oauth: true`): `GET /.well-known/openid-configuration`, `GET /oauth/authorize`
(the browser is signed in to the Hub as the account `sign_in_as` names and consents at once: a redirect back with a
code), `POST /oauth/token` (the code for an access token and an RS256 ID token with the nonce), `GET /oauth/userinfo`
and `GET /oauth/jwks` (the key that checks the ID token).

A revision is a branch (`main`), a full commit id, or a pull request's ref, URL-encoded as the clients send it
(`refs%2Fpr%2F1`). Errors carry the Hub's `X-Error-Code` (RepoNotFound, RevisionNotFound, EntryNotFound), which
huggingface_hub turns into its own exceptions. `add_model(repo_id, files)` makes a repo with one commit on main, and
`open_pull_request(repo_id, files)` a pull request on top of main (by default the one SFconvertbot, the Hub's
safetensors conversion bot, opens), so that a test can lay a repo out as real ones are.

It records what was committed: `hub.files(repo_id, repo_type="model") -> {path: bytes}`. With `token=...` it
answers 401 to requests that do not carry that bearer token, like the Hub does for a bad or missing token. With
`stalled_commits=N` it stands in for a Hub that stalls: the next N commits are read half-way and never answered (the
connection stays open until the hub stops), as when the Hub or a proxy hangs in the middle of an upload.

    with LoopbackHub() as hub:
        HfApi(endpoint=hub.endpoint, token="hf_test").create_repo("me/model")
"""

import base64
import functools
import hashlib
import json
import re
import secrets
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

import yaml

_FRONT_MATTER = re.compile(r"^---\s*\n(.*?)\n---\s*(?:\n|$)", re.DOTALL)
_REPO_PATH = re.compile(r"^/api/(?P<type>models|datasets|spaces)/(?P<repo_id>[^/]+/[^/]+)(?P<rest>/.*)?$")
# /{repo_id}/resolve/{revision}/{path} (models), /datasets/... and /spaces/... for the others.
_RESOLVE_PATH = re.compile(
    r"^/(?:(?P<type>datasets|spaces)/)?(?P<repo_id>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<file>.+)$"
)
_TYPE_FROM_PLURAL = {"models": "model", "datasets": "dataset", "spaces": "space"}
_URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}
# What the Hub keeps in LFS (its default .gitattributes): for these, HEAD answers the linked (LFS) etag and size.
_LFS_SUFFIXES = (".bin", ".safetensors", ".h5", ".msgpack", ".ot", ".onnx", ".pt", ".pth", ".ckpt", ".model")
CONVERSION_BOT = "SFconvertbot"
CONVERSION_TITLE = "Adding `safetensors` variant of this model"  # the bot's title, which transformers looks for


def _blob_id(data: bytes) -> str:
    """git's id of a blob: what the Hub's ETag and `oid` carry for a regular file."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _is_lfs(path: str) -> bool:
    return path.endswith(_LFS_SUFFIXES)


class _Repo:
    """A repo's history: a tree of files per commit, refs (branches, `refs/pr/N`) naming commits, pull requests."""

    def __init__(self, repo_id: str, repo_type: str, sdk: str | None, private: bool):
        self.repo_id = repo_id
        self.repo_type = repo_type
        self.sdk = sdk
        self.private = private
        self.commits: list[dict] = []  # in the order they were made: oid, parent, summary, files added
        self.trees: dict[str, dict[str, bytes]] = {}  # commit id -> {path: content}
        self.refs: dict[str, str] = {}  # "main", "refs/pr/1" -> commit id
        self.discussions: list[dict] = []

    @property
    def sha(self) -> str:
        return self.refs.get("main", "0" * 40)

    @property
    def files(self) -> dict[str, bytes]:
        """main's files."""
        return dict(self.trees.get(self.sha, {}))

    def add_commit(self, tree: dict[str, bytes], ref: str, summary: str, parent: str | None = None) -> str:
        """Record `tree` as a new commit on `ref` (its parent: `parent`, else what `ref` names) and return its id."""
        parent = parent or self.refs.get(ref)
        digest = hashlib.sha1(
            json.dumps([parent, summary, sorted((path, _blob_id(data)) for path, data in tree.items())]).encode()
        ).hexdigest()
        self.trees[digest] = dict(tree)
        self.refs[ref] = digest
        added = sorted(path for path, data in tree.items() if self.trees.get(parent, {}).get(path) != data)
        self.commits.append({"oid": digest, "parent": parent, "summary": summary, "files": added})
        return digest

    def resolve(self, revision: str) -> str | None:
        """The commit a branch, pull-request ref or commit id names; None if none."""
        if revision in self.refs:
            return self.refs[revision]
        return revision if revision in self.trees else None

    def history(self, commit: str) -> list[dict]:
        """The commits reaching `commit`, newest first."""
        by_id = {item["oid"]: item for item in self.commits}
        found = []
        while commit in by_id:
            found.append(by_id[commit])
            commit = by_id[commit]["parent"]
        return found


class LoopbackHub:
    """The Hub's repo-create / preupload / commit endpoints on 127.0.0.1, recording every upload."""

    def __init__(self, token: str | None = None, stalled_commits: int = 0):
        self.token = token
        self.stalled_commits = stalled_commits
        self._stopping = threading.Event()  # releases the stalled requests
        self.repos: dict[tuple[str, str], _Repo] = {}
        self.requests: list[tuple[str, str]] = []  # (method, path) in order, to check what a client did
        self._lock = threading.Lock()
        self.accounts: dict[str, dict] = {}  # token -> the account whoami-v2 answers for it
        self.openid = OpenIdProvider(self)
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

    def add_model(self, repo_id: str, files: dict[str, bytes], summary: str = "Upload model") -> str:
        """A model repo holding `files` in one commit on main; returns the commit id."""
        with self._lock:
            repo = self.repos.setdefault(("model", repo_id), _Repo(repo_id, "model", None, False))
            return repo.add_commit(files, "main", summary)

    def open_pull_request(
        self,
        repo_id: str,
        added: dict[str, bytes],
        *,
        author: str = CONVERSION_BOT,
        title: str = CONVERSION_TITLE,
        status: str = "open",
    ) -> tuple[int, str]:
        """A pull request adding `added` to main's files, as a commit on `refs/pr/N` whose parent is main's commit
        (the way the Hub's conversion bot opens one); returns (N, the commit id)."""
        with self._lock:
            repo = self.repos[("model", repo_id)]
            number = len(repo.discussions) + 1
            commit = repo.add_commit({**repo.files, **added}, f"refs/pr/{number}", title, parent=repo.sha)
            repo.discussions.append(
                {
                    "num": number,
                    "title": title,
                    "status": status,
                    "isPullRequest": True,
                    "author": {"name": author},
                    "createdAt": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                    "repo": {"name": repo_id, "type": "model"},
                    "numComments": 1,
                    "pinned": False,
                }
            )
            return number, commit

    def add_account(self, name: str, fullname: str = "", token: str | None = None) -> dict:
        """A user account on the Hub: whoami-v2 answers it for `token`, and `sign_in_as(name)` signs a browser in."""
        account = {
            "type": "user",
            "name": name,
            "fullname": fullname or name,
            "avatarUrl": f"{self.endpoint}/avatars/{name}.png",
        }
        with self._lock:
            self.openid.users[name] = account
            if token is not None:
                self.accounts[token] = account
        return account

    def add_oauth_app(self, client_id: str, client_secret: str) -> None:
        """The OAuth app the Hub registers for a Space whose metadata says `hf_oauth: true`."""
        with self._lock:
            self.openid.apps[client_id] = client_secret

    def sign_in_as(self, name: str | None) -> None:
        """The account the browser is signed in to the Hub with (None: nobody, and /oauth/authorize refuses)."""
        with self._lock:
            self.openid.signed_in = name

    # ------------------------------------------------------------------ request handling

    def _handler_class(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output quiet
                pass

            def do_GET(self):
                hub._dispatch(self, "GET")

            def do_HEAD(self):
                hub._dispatch(self, "HEAD")

            def do_POST(self):
                hub._dispatch(self, "POST")

        return Handler

    def _dispatch(self, request: BaseHTTPRequestHandler, method: str) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        path, query = urlsplit(request.path)[2:4]
        query = {name: values[-1] for name, values in parse_qs(query).items()}
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
        # Sign-in has credentials of its own (an OAuth app's, a user's token), not the repo token asked below.
        if path == "/api/whoami-v2" and method == "GET":
            return self._whoami(request)
        if self.openid.serves(path):
            return self.openid.answer(request, method, path, query, body)
        if self.token is not None and request.headers.get("Authorization") != f"Bearer {self.token}":
            return _reply(request, 401, {"error": "Invalid credentials in Authorization header"})
        try:
            if method == "POST" and path == "/api/repos/create":
                return self._create_repo(request, json.loads(body))
            if method == "POST" and path == "/api/validate-yaml":
                return self._validate_yaml(request, json.loads(body))
            match = _RESOLVE_PATH.match(path)
            if method in ("GET", "HEAD") and match:
                return self._resolve(request, method, _TYPE_FROM_PLURAL.get(match["type"], "model"), match)
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
                    return self._repo_info(request, repo, unquote(rest.removeprefix("/revision/")) or "main", query)
                if method == "GET" and rest.startswith("/tree/"):
                    revision, _, folder = rest.removeprefix("/tree/").partition("/")
                    return self._tree(request, repo, unquote(revision), unquote(folder), query)
                if method == "GET" and rest.startswith("/commits/"):
                    return self._commits(request, repo, unquote(rest.removeprefix("/commits/")))
                if method == "GET" and rest == "/discussions":
                    return self._discussions(request, repo, query)
            _reply(request, 404, {"error": f"The loopback hub does not implement {method} {path}"})
        except (ValueError, KeyError) as error:
            _reply(request, 400, {"error": f"Bad request: {error}"})

    def _whoami(self, request) -> None:
        with self._lock:
            account = self.accounts.get(request.headers.get("Authorization", "").removeprefix("Bearer "))
        if account is None:
            return _reply(request, 401, {"error": "Invalid credentials in Authorization header"})
        _reply(request, 200, account)

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
        with self._lock:
            tree = repo.files
            for path in deleted:
                tree = {name: data for name, data in tree.items() if name != path and not name.startswith(path + "/")}
            digest = repo.add_commit({**tree, **added}, "main", items[0]["value"].get("summary") or "")
        url = f"{self.endpoint}/{_URL_PREFIX[repo.repo_type]}{repo.repo_id}/commit/{digest}"
        _reply(request, 200, {"commitUrl": url, "commitOid": digest, "pullRequestUrl": None})

    def _at(self, request, repo: _Repo, revision: str) -> tuple[str, dict[str, bytes]] | None:
        """(commit, its files) for `revision`, or None after answering 404 RevisionNotFound."""
        with self._lock:
            commit = repo.resolve(revision)
            tree = dict(repo.trees.get(commit, {}))
        if commit is None:
            _reply(request, 404, {"error": f"Invalid rev id: {revision}"}, {"X-Error-Code": "RevisionNotFound"})
            return None
        return commit, tree

    def _repo_info(self, request, repo: _Repo, revision: str, query: dict) -> None:
        found = self._at(request, repo, revision)
        if found is None:
            return
        commit, tree = found
        siblings = []
        for name, data in sorted(tree.items()):
            sibling = {"rfilename": name}
            if query.get("blobs") == "true":
                sibling.update(_file_entry(name, data, "blobId"))
            siblings.append(sibling)
        info = {"id": repo.repo_id, "sha": commit, "private": repo.private, "siblings": siblings}
        if repo.sdk:
            info["sdk"] = repo.sdk
        _reply(request, 200, info)

    def _tree(self, request, repo: _Repo, revision: str, folder: str, query: dict) -> None:
        found = self._at(request, repo, revision)
        if found is None:
            return
        prefix = folder.strip("/") + "/" if folder.strip("/") else ""
        recursive = query.get("recursive") in ("true", "1", "True")
        entries, folders = [], set()
        for name, data in sorted(found[1].items()):
            if not name.startswith(prefix):
                continue
            parts = name[len(prefix) :].split("/")
            for depth in range(1, len(parts) if recursive else min(len(parts), 2)):
                folders.add(prefix + "/".join(parts[:depth]))
            if recursive or len(parts) == 1:
                entries.append({"type": "file", "path": name, **_file_entry(name, data, "oid")})
        if prefix and not entries and not folders:
            return _reply(
                request, 404, {"error": f"{folder} does not exist at {revision}"}, {"X-Error-Code": "EntryNotFound"}
            )
        entries += [
            {"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(), "size": 0, "path": path}
            for path in sorted(folders)
        ]
        _reply(request, 200, entries)

    def _commits(self, request, repo: _Repo, revision: str) -> None:
        found = self._at(request, repo, revision)
        if found is None:
            return
        with self._lock:
            history = repo.history(found[0])
        date = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        _reply(
            request,
            200,
            [
                {
                    "id": item["oid"],
                    "title": item["summary"],
                    "message": "",
                    "date": date,
                    "authors": [
                        {"user": CONVERSION_BOT if item["summary"] == CONVERSION_TITLE else "loopback", "avatar": ""}
                    ],
                }
                for item in history
            ],
        )

    def _discussions(self, request, repo: _Repo, query: dict) -> None:
        def wanted(item: dict) -> bool:
            kind = {"pull_request": True, "discussion": False}.get(query.get("type", "all"), item["isPullRequest"])
            return (
                query.get("author") in (None, item["author"]["name"])
                and kind == item["isPullRequest"]
                and query.get("status") in (None, "all", item["status"])
            )

        with self._lock:
            found = [item for item in reversed(repo.discussions) if wanted(item)]  # newest first, as the Hub lists
        closed = sum(item["status"] != "open" for item in found)
        _reply(request, 200, {"discussions": found, "count": len(found), "start": 0, "numClosedDiscussions": closed})

    def _resolve(self, request, method: str, repo_type: str, match: re.Match) -> None:
        """A file at a revision, with the headers huggingface_hub reads (HEAD: the same, no body)."""
        with self._lock:
            repo = self.repos.get((repo_type, match["repo_id"]))
        if repo is None:
            return _reply(
                request, 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}, head=method == "HEAD"
            )
        revision, name = unquote(match["revision"]), unquote(match["file"])
        with self._lock:
            commit = repo.resolve(revision)
            data = repo.trees.get(commit, {}).get(name)
        if commit is None:
            return _reply(
                request,
                404,
                {"error": f"Invalid rev id: {revision}"},
                {"X-Error-Code": "RevisionNotFound"},
                head=method == "HEAD",
            )
        if data is None:
            return _reply(
                request,
                404,
                {"error": f"Entry not found: {name}"},
                {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit},
                head=method == "HEAD",
            )
        request.send_response(200)
        request.send_header("Content-Type", "application/octet-stream")
        request.send_header("Content-Length", str(len(data)))
        request.send_header("X-Repo-Commit", commit)
        request.send_header("ETag", f'"{_blob_id(data)}"')
        if _is_lfs(name):
            request.send_header("X-Linked-Etag", f'"{hashlib.sha256(data).hexdigest()}"')
            request.send_header("X-Linked-Size", str(len(data)))
        request.end_headers()
        if method == "GET":
            request.wfile.write(data)


class OpenIdProvider:
    """The Hub's OpenID Connect endpoints, as authlib (Gradio's "Sign in with Hugging Face") calls them: the
    authorization-code flow, its ID token signed with an RSA key of this run, the claims the Hub's ID token carries."""

    PATHS = ("/.well-known/openid-configuration", "/oauth/authorize", "/oauth/token", "/oauth/userinfo", "/oauth/jwks")

    def __init__(self, hub: LoopbackHub):
        self.hub = hub
        self.apps: dict[str, str] = {}  # client id -> client secret
        self.users: dict[str, dict] = {}  # name -> account
        self.signed_in: str | None = None
        self.codes: dict[str, dict] = {}  # an issued code -> what its token will say (used once)
        self.tokens: dict[str, dict] = {}  # an access token -> its claims

    @functools.cached_property
    def key(self):
        """The signing key, made when first asked for (a second or so of CPU that the repo tests need not spend)."""
        from joserfc.jwk import RSAKey  # authlib's JOSE library: the one that checks the ID token in the app

        return RSAKey.generate_key(2048, parameters={"kid": "loopback", "use": "sig", "alg": "RS256"})

    def serves(self, path: str) -> bool:
        return path in self.PATHS

    def answer(self, request, method: str, path: str, query: dict, body: bytes) -> None:
        if path == "/.well-known/openid-configuration":
            return _reply(request, 200, self.configuration())
        if path == "/oauth/jwks":
            return _reply(request, 200, {"keys": [self.key.as_dict(private=False)]})
        if path == "/oauth/authorize" and method == "GET":
            return self.authorize(request, query)
        if path == "/oauth/token" and method == "POST":
            return self.token(request, {name: values[-1] for name, values in parse_qs(body.decode()).items()})
        if path == "/oauth/userinfo":
            claims = self.tokens.get(request.headers.get("Authorization", "").removeprefix("Bearer "))
            return _reply(request, 200, claims) if claims else _reply(request, 401, {"error": "invalid_token"})
        _reply(request, 405, {"error": f"{method} {path} is not allowed"})

    def configuration(self) -> dict:
        base = self.hub.endpoint
        return {
            "issuer": base,
            "authorization_endpoint": f"{base}/oauth/authorize",
            "token_endpoint": f"{base}/oauth/token",
            "userinfo_endpoint": f"{base}/oauth/userinfo",
            "jwks_uri": f"{base}/oauth/jwks",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": ["openid", "profile"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        }

    def authorize(self, request, query: dict) -> None:
        """A signed-in browser that consents: back to the app's redirect URI with a one-time code and its state."""
        with self.hub._lock:
            known, user = query.get("client_id") in self.apps, self.users.get(self.signed_in or "")
        if not known or query.get("response_type") != "code" or not query.get("redirect_uri"):
            return _reply(request, 400, {"error": "invalid_request: unknown client, no redirect_uri or not code"})
        if user is None:
            return _reply(request, 401, {"error": "login_required: nobody is signed in to the Hub"})
        code = secrets.token_urlsafe(16)
        with self.hub._lock:
            self.codes[code] = {
                "client_id": query["client_id"],
                "redirect_uri": query["redirect_uri"],
                "user": user,
                "nonce": query.get("nonce"),
                "scope": query.get("scope", ""),
            }
        back = f"{query['redirect_uri']}{'&' if '?' in query['redirect_uri'] else '?'}"
        request.send_response(302)
        request.send_header("Location", back + urlencode({"code": code, "state": query.get("state", "")}))
        request.send_header("Content-Length", "0")
        request.end_headers()

    def token(self, request, form: dict) -> None:
        """The code exchanged for an access token and an ID token, for the app it was issued to (Basic or form auth)."""
        client_id, secret = form.get("client_id"), form.get("client_secret")
        basic = request.headers.get("Authorization", "")
        if basic.startswith("Basic "):
            client_id, _, secret = base64.b64decode(basic[6:]).decode().partition(":")
        with self.hub._lock:
            grant = self.codes.pop(form.get("code", ""), None)
            app_secret = self.apps.get(client_id or "")
        if app_secret is None or secret != app_secret:
            return _reply(request, 401, {"error": "invalid_client"})
        if grant is None or grant["client_id"] != client_id or grant["redirect_uri"] != form.get("redirect_uri"):
            return _reply(request, 400, {"error": "invalid_grant"})
        from joserfc import jwt

        now, user = int(time.time()), grant["user"]
        claims = {
            "sub": hashlib.sha256(user["name"].encode()).hexdigest()[:24],
            "name": user["fullname"],
            "preferred_username": user["name"],
            "profile": f"{self.hub.endpoint}/{user['name']}",
            "picture": user["avatarUrl"],
            "website": "",
            "iss": self.hub.endpoint,
            "aud": client_id,
            "iat": now,
            "exp": now + 3600,
            "auth_time": now,
        }
        access = "hf_oauth_" + secrets.token_urlsafe(16)
        with self.hub._lock:
            self.tokens[access] = claims
        signed = dict(claims, nonce=grant["nonce"]) if grant["nonce"] else claims
        id_token = jwt.encode({"alg": "RS256", "kid": "loopback"}, signed, self.key)
        _reply(
            request,
            200,
            {
                "access_token": access,
                "token_type": "bearer",
                "expires_in": 3600,
                "scope": grant["scope"],
                "id_token": id_token,
            },
        )


def _file_entry(name: str, data: bytes, id_field: str) -> dict:
    """A file's git id and size, and for an LFS file its sha256 (as tree listings and `blobs=true` siblings give)."""
    entry = {id_field: _blob_id(data), "size": len(data)}
    if _is_lfs(name):
        entry["lfs"] = {
            "sha256": hashlib.sha256(data).hexdigest(),
            "oid": hashlib.sha256(data).hexdigest(),
            "size": len(data),
            "pointerSize": 134,
        }
    return entry


def _reply(
    request: BaseHTTPRequestHandler, status: int, payload: dict | list, headers: dict | None = None, head: bool = False
) -> None:
    data = json.dumps(payload).encode()
    request.send_response(status)
    request.send_header("Content-Type", "application/json")
    request.send_header("Content-Length", str(len(data)))
    if status >= 400 and isinstance(payload, dict) and "error" in payload:
        request.send_header("X-Error-Message", str(payload["error"]))
    for name, value in (headers or {}).items():
        request.send_header(name, value)
    request.end_headers()
    if not head and request.command != "HEAD":  # a HEAD answer has no body, whatever its status (else the next
        request.wfile.write(data)  # answer on the kept-alive connection starts with it: "illegal status line")


def folder_files(folder: str | Path) -> dict[str, bytes]:
    """Every file under `folder`: {path inside it: content}, as a repo would hold them."""
    folder = Path(folder)
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*") if path.is_file()}
