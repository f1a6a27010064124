"""Where a secret key comes from (a file or the environment) and how a call is signed."""

import argparse

import pytest

from rmqstore import access_keys


def test_the_secret_is_the_file_s_line_else_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(access_keys.SECRET_KEY_ENV, "from-env")
    path = tmp_path / "secret"
    path.write_text("from-file\n")
    assert access_keys.read_secret(str(path)) == "from-file"
    assert access_keys.read_secret("") == "from-env"
    path.write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        access_keys.read_secret(str(path))
    with pytest.raises(ValueError, match="secret key file"):
        access_keys.read_secret(str(tmp_path / "missing"))


def test_a_secret_on_the_command_line_is_refused_without_echoing_it(capsys):
    p = argparse.ArgumentParser()
    access_keys.add_secret_flags(p, "for tests")
    with pytest.raises(SystemExit):
        p.parse_args(["--access-key", "AK", "--secret-key", "hunter2"])
    err = capsys.readouterr().err
    assert "--secret-key-file" in err and "hunter2" not in err


def test_signed_headers_carry_the_date_they_sign():
    md = dict(access_keys.metadata("AK", "SK", now=1_790_000_000))
    date = md[access_keys.DATE_HEADER]
    assert date == "20260921T141320Z"
    assert access_keys.parse_date(date) == 1_790_000_000
    assert md["authorization"] == access_keys.sign("AK", "SK", date)
    assert access_keys.metadata("", "SK") == ()
