"""The README's first command (`make lab`) starts a JupyterLab that serves the course."""
import os
import secrets
import socket
import time
from pathlib import Path

import requests

from gnnbook.base.procs import ProcessGroup

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_lab_serves_the_chapters(tmp_path):
    port, token = _free_port(), secrets.token_hex(16)
    args = f"--no-browser --port={port} --ServerApp.port_retries=0 --IdentityProvider.token={token}"
    env = {"JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_CONFIG_DIR": str(tmp_path / "config")}
    with ProcessGroup(deadline_s=120, log_dir=tmp_path / "logs") as group:
        group.start("jupyterlab", ["make", "-s", "lab", f"LAB_ARGS={args}"], env=env, cwd=ROOT)
        url = f"http://127.0.0.1:{port}/api/contents/chapters"
        listing = None
        for _ in range(600):
            group._check_failures()
            try:
                response = requests.get(url, params={"token": token}, timeout=2)
                if response.status_code == 200:
                    listing = response.json()
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        assert listing is not None, group.log("jupyterlab")
        names = {item["name"] for item in listing["content"]}
        assert {"01_introduction.ipynb", "02_gnn_models.ipynb"} <= names
        assert requests.get(url, timeout=2).status_code in (401, 403), "the token is required"
        with socket.socket() as s:  # bound to loopback only
            assert s.connect_ex(("127.0.0.1", port)) == 0
    assert not os.path.exists(f"/proc/{group.members[0].popen.pid}")
