"""The Curio node stand-in's JSON-RPC (images/curio/curio_node.py), for the two methods a swap calls.

POST /rpc/v0 on the node's --listen address (cmd/curio/rpc/rpc.go:79-84): `Filecoin.Cordon` and
`Filecoin.Uncordon` (perm admin, api/api_curio.go:28-29) run `UPDATE harmony_machines SET unschedulable = $1
WHERE id = $2` for the node (rpc.go:376-390). A bearer token is an HS256 JWT `{"Allow": [...]}` signed with the
layers' `[Apis] StorageRPCSecret` (base64; rpc.go:477-490; `curio cli` signs its own so, cli.go:145-162): one
that does not verify, or a header without `Bearer `, is HTTP 401 with no body (go-jsonrpc auth/handler.go:28-42);
none, or one without admin, reaches the method, which answers PermissionedAPI's error. Answers are go-jsonrpc's
(response.go:16-36): `result` on success, `error` otherwise, never both.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import json
import socket
import threading
import time

ALL = ("read", "write", "sign", "admin")  # api.AllPermissions, what `curio cli` signs (cli.go:151-153)


def sign(secret_b64: str, allow: tuple[str, ...] = ALL) -> str:
    """A token as `curio cli` makes one from the secret (cli.go:145-162): for tests and the sandbox."""
    def b64(b: bytes) -> str:
        return base64.urlsafe_b64encode(b).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps({"Allow": list(allow)}).encode())
    sig = hmac.new(base64.b64decode(secret_b64), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(sig)}"


def call(node, token: str | None, method: str) -> tuple[int, dict | None]:
    """One JSON-RPC call to `node` (curio_node.Node): the HTTP status and the error (None: a result, or 401)."""
    allow: list[str] = []
    if token is not None:
        allow_or_none = verify(token, node.rpc_secret)
        if allow_or_none is None:
            node.rpc.append((time.time(), method, "401"))
            return 401, None
        allow = allow_or_none
    if method not in ("Filecoin.Cordon", "Filecoin.Uncordon"):
        return 200, {"code": -32601, "message": f"method '{method}' not found"}
    if "admin" not in allow:  # the permissioned proxy's refusal (go-jsonrpc auth/auth.go:60-66)
        node.rpc.append((time.time(), method, "no admin"))
        return 200, {"code": 1, "message": f"missing permission to invoke '{method.split('.')[1]}' (need 'admin')"}
    with node.db() as c:
        c.execute("UPDATE harmony_machines SET unschedulable = %s WHERE id = %s",
                  (method == "Filecoin.Cordon", node.owner_id))
    node.rpc.append((time.time(), method, "ok"))
    node.say(f"rpc method={method}")  # a line of the node's log, written whole among its threads' lines
    return 200, None


def verify(token: str, secret: bytes) -> list[str] | None:
    """The `Allow` of an HS256 JWT signed with `secret` (gbrlsnchs/jwt, as rpc.go:483-490 verifies it), else None."""
    try:
        head, body, sig = token.split(".")
        want = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
        if not secret or not hmac.compare_digest(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)), want):
            return None
        allow = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))).get("Allow", [])
        return [a for a in allow if isinstance(a, str)]
    except (ValueError, AttributeError):
        return None


def serve_rpc(node, listener: socket.socket) -> http.server.HTTPServer:
    """The node's JSON-RPC on its --listen socket, in a thread."""

    class Rpc(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            try:
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                method, rid = str(req.get("method")), req.get("id")
            except (ValueError, AttributeError):
                method, rid = "", None
            auth = self.headers.get("Authorization")
            if auth is not None and not auth.startswith("Bearer "):
                status, err = 401, None
            else:
                status, err = call(node, auth[len("Bearer "):] if auth else None, method)
            body = b"" if status == 401 else json.dumps(
                {"id": rid, "jsonrpc": "2.0", **({"error": err} if err else {"result": None})}).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(listener.getsockname()[:2], Rpc, bind_and_activate=False)
    server.socket.close()
    server.socket = listener
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


