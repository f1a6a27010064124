"""The README's RocketMQ 5 client examples, run as they are (the endpoint changed to a fresh
``rmqstore serve``) with the official Python and Node.js clients: each sends a message and
receives it back through a consumer group."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests import procs
from tests.services.proxy.conftest import CLIENTS, NODE_MODULES, PYTHON_CLIENT, Serve, client_env

pytestmark = pytest.mark.integration
README = procs.ROOT / "README.md"
ENDPOINT = "127.0.0.1:8104"


def _example(language: str) -> str:
    """The README's one code block of ``language`` that uses RocketMQ's client."""
    blocks = re.findall(rf"```{language}\n(.*?)```", README.read_text(), re.S)
    (block,) = [b for b in blocks if "SimpleConsumer" in b]
    assert ENDPOINT in block
    return block


def _run(argv: list[str], env: dict[str, str]) -> list[str]:
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"{argv[0]} example failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout.splitlines()


def test_readme_examples_send_and_receive(tmp_path: Path) -> None:
    missing = [str(p) for p in (PYTHON_CLIENT, NODE_MODULES) if not p.exists()]
    assert not missing, f"the official clients are not installed: {missing} (make test-deps)"
    serve = Serve(tmp_path / "store")
    try:
        env = client_env(tmp_path / "home")
        script = tmp_path / "example.py"
        script.write_text(_example("python").replace(ENDPOINT, serve.proxy))
        out = _run([str(PYTHON_CLIENT), str(script)], env)
        assert re.fullmatch(r"[0-9A-F]{34}", out[0]) and out[1:] == ["b'order 42 paid'"], out

        script = tmp_path / "example.js"  # top-level await needs an async function in CommonJS
        body = _example("js").replace(ENDPOINT, serve.proxy)
        script.write_text(f"(async () => {{\n{body}}})().catch((e) => {{ console.error(e); "
                          "process.exit(1); });\n")  # fmt: skip
        node_env = {**env, "NODE_PATH": str(CLIENTS / "node_modules")}
        out = _run(["node", str(script)], node_env)
        assert re.fullmatch(r"[0-9A-F]{34}", out[0]) and out[1:] == ["order 7 paid"], out
    finally:
        assert serve.stop() == 0, "".join(serve.lines)
    assert os.path.getsize(tmp_path / "store" / "config" / "consumerOffset.json") > 0
