"""Each auth mode admits the right requests and refuses the others."""

import base64
import subprocess
import sys

import pytest

from services.console.auth import Authenticator, LoginLimiter, load_users
from tests import procs
from tests.services.console.http import get

pytestmark = pytest.mark.integration


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture(scope="module")
def users_file(tmp_path_factory) -> str:
    out = subprocess.run([sys.executable, "-m", "services.console", "--hash-password", "alice"],
                         input="s3cret pass\n", capture_output=True, text=True, cwd=procs.ROOT,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    path = tmp_path_factory.mktemp("auth") / "users"
    path.write_text("# console users\n" + out.stdout)
    assert set(load_users(path)) == {"alice"}
    return str(path)


def test_auth_none_refuses_a_non_loopback_bind(served):
    with pytest.raises(RuntimeError, match="only on a loopback address"):
        served.console("--listen", "0.0.0.0:0")


def test_basic_refuses_wrong_credentials_and_admits_a_user(served, users_file):
    proc = served.console("--auth", "basic", "--users-file", users_file, "--secure-cookie")
    base = f"http://{proc.address}"
    try:
        r = get(base + "/topics")
        assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Basic ")
        assert get(base + "/api/v1/store", _basic("alice", "wrong")).status == 401
        assert get(base + "/topics", _basic("mallory", "s3cret pass")).status == 401
        assert get(base + "/topics", {"Authorization": "Basic !!!"}).status == 401
        assert get(base + "/healthz").status == 200
        r = get(base + "/topics", _basic("alice", "s3cret pass"))
        assert r.status == 200 and "Signed in as alice" in r.text
        cookie = r.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Secure" in cookie
        session = cookie.split(";")[0]
        assert get(base + "/api/v1/store", {"Cookie": session}).status == 200
        name, value = session.split("=", 1)
        forged = value[:-2] + ("AA" if value[-2:] != "AA" else "BB")
        assert get(base + "/api/v1/store", {"Cookie": f"{name}={forged}"}).status == 401
    finally:
        proc.stop()


def test_proxy_header_trusts_only_the_configured_proxies(served):
    trusted = served.console("--auth", "proxy-header", "--trusted-proxy", "127.0.0.0/8",
                             "--identity-header", "X-Auth-User")
    other = served.console("--auth", "proxy-header", "--trusted-proxy", "10.0.0.0/8",
                           "--identity-header", "X-Auth-User")
    try:
        base = f"http://{trusted.address}"
        r = get(base + "/topics", {"X-Auth-User": "bob"})
        assert r.status == 200 and "Signed in as bob" in r.text
        assert get(base + "/topics").status == 401
        assert get(base + "/topics", {"X-Forwarded-User": "bob"}).status == 401
        r = get(f"http://{other.address}/topics", {"X-Auth-User": "bob"})
        assert r.status == 403
    finally:
        trusted.stop()
        other.stop()


def test_configurations_that_cannot_be_safe_are_refused(tmp_path):
    from services.console.auth import AuthConfigError

    with pytest.raises(AuthConfigError, match="needs --users-file"):
        Authenticator.configure("basic", "0.0.0.0", None, [], "X")
    with pytest.raises(AuthConfigError, match="needs --trusted-proxy"):
        Authenticator.configure("proxy-header", "0.0.0.0", None, [], "X")
    bad = tmp_path / "users"
    bad.write_text("alice:plain:secret\n")
    with pytest.raises(AuthConfigError, match="line 1"):
        load_users(bad)
    assert Authenticator.configure("none", "::1", None, [], "X").mode == "none"


def test_session_cookie_expires_and_is_bound_to_the_key():
    a, b = Authenticator("basic"), Authenticator("basic")
    cookie = a.session_cookie("alice", now=1000.0)
    assert a.session_user(cookie, now=1001.0) == "alice"
    assert a.session_user(cookie, now=1000.0 + 9 * 3600) is None
    assert b.session_user(cookie, now=1001.0) is None


def _port(base: str) -> str:
    return base.rsplit(":", 1)[1]


def test_a_console_without_auth_answers_only_under_its_own_names(console):
    port = _port(console)
    r = get(console + "/api/v1/topics", {"Host": f"attacker.example:{port}"})
    assert r.status == 421  # a page of attacker.example, its name rebound to 127.0.0.1
    assert "attacker.example" in r.text and "--allowed-host" in r.text
    assert get(console + "/topics", {"Host": "evil.example"}).status == 421
    assert get(console + "/topics", {"Host": ""}).status in (400, 421)
    for name in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}"):
        assert get(console + "/api/v1/topics", {"Host": name}).status == 200, name
    assert get(console + "/healthz", {"Host": "probe.example"}).status == 200


def test_allowed_host_adds_a_name_the_console_is_served_under(served):
    proc = served.console("--allowed-host", "console.example.org")
    base = f"http://{proc.address}"
    try:
        assert get(base + "/topics", {"Host": "console.example.org"}).status == 200
        assert get(base + "/topics", {"Host": "Console.Example.org.:443"}).status == 200
        assert get(base + "/topics", {"Host": "example.org"}).status == 421
        assert get(base + "/topics").status == 200  # 127.0.0.1:port, its listen address
    finally:
        proc.stop()


def test_failed_logins_are_limited_per_client(served, users_file):
    proc = served.console("--auth", "basic", "--users-file", users_file)
    base = f"http://{proc.address}"
    try:
        assert get(base + "/topics").status == 401  # no credentials: not a failed login
        for _ in range(5):
            assert get(base + "/topics", _basic("alice", "guess")).status == 401
        r = get(base + "/topics", _basic("alice", "s3cret pass"))  # even the right one
        assert r.status == 429
        assert 1 <= int(r.headers["Retry-After"]) <= 60
        assert get(base + "/healthz").status == 200
    finally:
        proc.stop()


def test_a_client_may_log_in_again_once_its_failures_age_out():
    now = [1000.0]
    limiter = LoginLimiter(max_failures=5, window_s=60, clock=lambda: now[0])
    for _ in range(5):
        assert limiter.retry_after("10.0.0.1") == 0
        limiter.failed("10.0.0.1")
        now[0] += 1  # failures at 1000 … 1004
    assert limiter.retry_after("10.0.0.1") == 55  # the first ages out at 1060
    assert limiter.retry_after("10.0.0.2") == 0  # per client
    now[0] = 1059.5
    assert limiter.retry_after("10.0.0.1") == 1
    now[0] = 1060.0
    assert limiter.retry_after("10.0.0.1") == 0  # four left in the window: one more try
    limiter.failed("10.0.0.1")
    assert limiter.retry_after("10.0.0.1") == 1  # the second (1001) ages out at 1061
    now[0] = 2000.0
    assert limiter.retry_after("10.0.0.1") == 0 and "10.0.0.1" not in limiter.failures
