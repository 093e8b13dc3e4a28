"""computewatch.redact: what is hidden, what is kept, and the false positives it avoids."""

from __future__ import annotations

import pytest

from computewatch.redact import (
    MARKER,
    is_secret_name,
    redact_argv,
    redact_mapping,
    redact_text,
    redact_urls,
)


@pytest.mark.parametrize(
    "name",
    [
        "password",
        "--password",
        "PASSWORD",
        "passwd",
        "db_pwd",
        "--api-token",
        "api_key",
        "api-key",
        "apiKey",
        "APIKey",
        "--apikey",
        "access_key",
        "AWS_SECRET_ACCESS_KEY",
        "private_key",
        "--client-secret",
        "credentials",
        "--auth",
        "Authorization",
        "session",
        "--cookie",
        "signature",
        "HF_TOKEN",
        "WANDB_API_KEY",
        "db.password",
        "sentry_dsn",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "--keyframes",
        "--monkey",
        "--max-tokens",
        "--max_new_tokens",
        "--tokenizer",
        "--num-tokens",
        "--pad-token-id",
        "--eos_token",
        "bos_token",
        "--author",
        "--passes",
        "--no-auth",
        "--disable-token",
        "--batch-size",
        "--lr",
        "PATH",
        "",
        "--",
    ],
)
def test_not_secret_names(name: str) -> None:
    assert not is_secret_name(name)


def test_extra_names_match_whole_components() -> None:
    assert is_secret_name("--hf-repo", extra=["hf"])
    assert is_secret_name("WANDB_ENTITY", extra=["wandb_entity"])
    assert is_secret_name("--my-wandb-entity-name", extra=["wandb-entity"])
    assert not is_secret_name("--hfx", extra=["hf"])
    assert not is_secret_name("--entity", extra=["wandb_entity"])


def test_the_probe_command() -> None:
    argv = [
        "python",
        "-c",
        "pass",
        "--password=hunter2",
        "--api-token=SECRET123",
        "postgres://u:pw@h/db",
    ]
    assert redact_argv(argv) == [
        "python",
        "-c",
        "pass",
        f"--password={MARKER}",
        f"--api-token={MARKER}",
        f"postgres://u:{MARKER}@h/db",
    ]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--password", "x", "--lr", "3"], ["--password", MARKER, "--lr", "3"]),
        (["--token", "--verbose"], ["--token", "--verbose"]),  # a flag, not a value
        (["--token"], ["--token"]),
        (["-token", "x"], ["-token", MARKER]),  # Go-style long flags
        (["-p", "hunter2"], ["-p", "hunter2"]),  # one letter: cannot be told (documented)
        (["-k=x"], ["-k=x"]),
        (["PASSWORD=x", "HOME=/root"], [f"PASSWORD={MARKER}", "HOME=/root"]),
        (["+db.password=x", "model.lr=3"], [f"+db.password={MARKER}", "model.lr=3"]),
        (
            ["--db-url", "postgres://user:pass@host/db"],
            ["--db-url", f"postgres://user:{MARKER}@host/db"],
        ),
        (["redis://:pw@host:6379"], [f"redis://:{MARKER}@host:6379"]),
        (["https://host/path?q=1"], ["https://host/path?q=1"]),
        (["user@host:path"], ["user@host:path"]),  # scp: no scheme, no password
        (["-H", "Authorization: Bearer abc"], ["-H", f"Authorization: Bearer {MARKER}"]),
        (["-H", "X-Api-Key: abc"], ["-H", f"X-Api-Key: {MARKER}"]),
        (["-H", "Accept: text/plain"], ["-H", "Accept: text/plain"]),
        (["--header=Authorization:Basic dXNlcjpwdw=="], [f"--header=Authorization:Basic {MARKER}"]),
        (["localhost:8080"], ["localhost:8080"]),
        (
            ["--json", '{"api_key": "abc", "lr": 3}'],
            ["--json", f'{{"api_key": "{MARKER}", "lr": 3}}'],
        ),
        (["--keyframes", "10", "--monkey", "y"], ["--keyframes", "10", "--monkey", "y"]),
        (
            ["--max-tokens", "512", "--pad_token_id", "0"],
            ["--max-tokens", "512", "--pad_token_id", "0"],
        ),
        (["--eos-token", "</s>"], ["--eos-token", "</s>"]),
        (["--no-auth", "train.py"], ["--no-auth", "train.py"]),
        ([], []),
    ],
)
def test_redact_argv(argv: list[str], expected: list[str]) -> None:
    assert redact_argv(argv) == expected


def test_shell_strings_are_redacted_word_by_word() -> None:
    got = redact_argv(
        ["bash", "-c", "curl -H 'Authorization: Basic abc' --token t2 https://u:p@h/x  && ls"]
    )
    assert got == [
        "bash",
        "-c",
        f"curl -H 'Authorization: Basic {MARKER}' --token {MARKER} https://u:{MARKER}@h/x  && ls",
    ]
    assert (
        redact_argv(["sh", "-c", "PASSWORD=x ./run --lr 3"])[2] == f"PASSWORD={MARKER} ./run --lr 3"
    )
    assert redact_argv(["sh", "-c", "echo Bearer abc"])[2] == f"echo Bearer {MARKER}"


def test_redact_text_keeps_whitespace() -> None:
    assert redact_text("a  --password x\tb") == f"a  --password {MARKER}\tb"
    assert redact_text("Authorization: Bearer abc") == f"Authorization: Bearer {MARKER}"
    assert redact_text("") == ""


def test_extra_names_in_argv() -> None:
    assert redact_argv(["--wandb", "abc"], extra=["wandb"]) == ["--wandb", MARKER]
    assert redact_argv(["MY_THING=1"], extra=["my_thing"]) == [f"MY_THING={MARKER}"]


def test_redact_urls_and_mapping() -> None:
    assert redact_urls("a mysql://root:toor@db:3306/x b") == f"a mysql://root:{MARKER}@db:3306/x b"
    assert redact_urls("http://user@host/") == "http://user@host/"
    tags = {"team": "ml", "api_token": "x", "db": "postgres://u:pw@h/d"}
    assert redact_mapping(tags) == {
        "team": "ml",
        "api_token": MARKER,
        "db": f"postgres://u:{MARKER}@h/d",
    }


def test_redaction_is_idempotent() -> None:
    argv = ["--password", "x", "--api-key=y", "postgres://u:pw@h/db", "Authorization: Bearer z"]
    once = redact_argv(argv)
    assert redact_argv(once) == once
    assert not any(s in " ".join(once) for s in ("x ", "=y", "pw", " z"))


# -- secrets in a URL's query, a colon flag, a bare user:password@host, a value's own NAME=VALUE


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["curl", "https://host/cb?token=S&x=1"],
            ["curl", f"https://host/cb?token={MARKER}&x=1"],
        ),
        (
            ["fetch", "https://h/p?a=1&api_key=S#frag"],
            ["fetch", f"https://h/p?a=1&api_key={MARKER}#frag"],
        ),
        (["tool", "--password:S"], ["tool", f"--password:{MARKER}"]),
        (["rsync", "user:S@host:/data"], ["rsync", f"user:{MARKER}@host:/data"]),
        (["run", "--tag", "note=PASSWORD=S"], ["run", "--tag", f"note=PASSWORD={MARKER}"]),
        (["run", "--tag=note=db_token=S"], ["run", f"--tag=note=db_token={MARKER}"]),
    ],
)
def test_secrets_hidden_in_queries_colon_flags_bare_userinfo_and_nested_values(
    argv: list[str], expected: list[str]
) -> None:
    assert redact_argv(argv) == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["curl", "https://host/search?q=tokenizer&page=2"],
        ["git", "clone", "git@github.com:org/repo.git"],
        ["mail", "mailto:bob@example.org"],
        ["python", "train.py", "--lr:0.1", "--epochs=3"],
        ["run", "--tag", "note=a=b"],
        ["ssh", "host:22"],
    ],
)
def test_what_only_looks_like_those_is_kept(argv: list[str]) -> None:
    assert redact_argv(argv) == argv


def test_tags_whose_value_names_a_secret_are_redacted() -> None:
    out = redact_mapping({"note": "PASSWORD=S", "cb": "https://h/cb?token=S", "team": "a"})
    assert out == {
        "note": f"PASSWORD={MARKER}",
        "cb": f"https://h/cb?token={MARKER}",
        "team": "a",
    }


def test_a_command_line_string_hides_them_too() -> None:
    text = "bash -c 'curl https://h/cb?token=S && rsync user:S@host:/x --password:S'"
    out = redact_text(text)
    assert "=S" not in out and ":S@" not in out and ":S'" not in out, out
