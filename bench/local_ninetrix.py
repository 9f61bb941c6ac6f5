"""A local ninetrix for the bench scripts: `ninetrix api --insecure-dev` on SQLite in a temporary
directory on a free loopback port, the JSON calls to it, and `ninetrix runner` processes against
it. Every process it starts is killed, and the directory removed, when the `with` block ends.
"""

import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid


class LocalNinetrix:
    def __init__(self, binary):
        self.binary = binary
        self.work = tempfile.TemporaryDirectory()
        self.procs = []
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        self.url = f"http://127.0.0.1:{port}"
        self.api = self._start([binary, "api", "--listen", f"127.0.0.1:{port}", "--database",
                                f"sqlite://{self.work.name}/api.db", "--insecure-dev"])
        deadline = time.monotonic() + 30
        while True:
            try:
                self.call("GET", "/healthz")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _start(self, argv, env=None):
        p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def call(self, method, path, body=None):
        """One API call as the admin; the answer's JSON (None when empty)."""
        data = json.dumps(body).encode() if body is not None else None
        r = urllib.request.Request(self.url + path, data=data, method=method,
                                   headers={"content-type": "application/json"})
        with urllib.request.urlopen(r) as resp:
            text = resp.read()
            return json.loads(text) if text else None

    def state(self, thread):
        """The thread's small state at its latest version (None before its first)."""
        try:
            return self.call("GET", f"/v1/runners/threads/{thread}/latest")["state"]
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def runner(self, spec, name, **env):
        """A runner of `spec` on a new thread, its workspace `<tmp>/<name>`; extra AGENTFILE_*
        variables as keyword arguments. Returns (process, thread id)."""
        thread = str(uuid.uuid4())
        workspace = os.path.join(self.work.name, name)
        os.makedirs(workspace, exist_ok=True)
        full = dict(os.environ, AGENTFILE_API_URL=self.url, AGENTFILE_RUNNER_TOKEN="insecure-dev",
                    AGENTFILE_THREAD_ID=thread, AGENTFILE_AGENT_SPEC=json.dumps(spec),
                    AGENTFILE_WORKSPACE=workspace, AGENTFILE_HEALTH_FILE=os.path.join(workspace, "health"),
                    RUST_LOG="warn", **env)
        return self._start([self.binary, "runner"], env=full), thread

    def workspace(self, name):
        return os.path.join(self.work.name, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()
        self.work.cleanup()
