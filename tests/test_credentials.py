"""The table of credential shapes that the redactor and `check --secrets` share."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from planted import PLANTED

from sse_tape import ConfigError
from sse_tape.credentials import SHAPES, Shapes


def test_the_table_names_each_shape_once_and_a_credential_of_each_is_found_as_its_kind() -> None:
    assert [shape.kind for shape in SHAPES] == list(PLANTED)
    shapes = Shapes()
    for kind, (secret, needle) in PLANTED.items():
        for text in (secret, f"my key: {secret}.", f'{{"content": "{secret}"}}'.replace("\n", "\\n")):
            assert shapes.kinds(text) == [kind], text
            assert needle not in shapes.scrub(text, "<redacted>")
            assert shapes.holds(text)


@pytest.mark.parametrize(
    "text",
    [
        "Basic authentication sends a user name and a password.",
        "Bearer authentication, with Bearer YOUR_TOKEN_HERE in the header",
        "max_tokens, sk-8, the skeleton key, task-ant-colony, hf_hub, ghp_ is GitHub's prefix",
        "https://example.com/a@b and alice@example.com, git@github.com:org/repo.git",
        "AKIA is how AWS access keys begin; wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY alone is any base64",
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----",
        "EqQBCkgIBxABGAIqQK9xq3Fz+Wn1u2Qy7bR0ZP4dLk8sQ3JmT5vN0aXeY1cGhI2oE/fUiOpL9wAsDfGhJkLz==",
    ],
    ids=["basic-prose", "bearer-prose", "prefixes", "at-signs", "aws-words", "public-key", "base64"],
)
def test_prose_and_model_output_are_no_credential(text: str) -> None:
    assert Shapes().kinds(text) == []


def test_a_credential_within_another_is_that_ones() -> None:
    # The API key in a bearer token is the bearer token; an AWS access key beside its secret key is the pair.
    key = PLANTED["an OpenAI API key"][0]
    assert Shapes().kinds(f"Authorization: Bearer {key}") == ["a bearer token"]
    assert Shapes().scrub(f"Authorization: Bearer {key}", "<r>") == "Authorization: <r>"


# Texts made to make a backtracking matcher go back and forth over the same characters: each shape's start,
# again and again, with no end that completes it, and long runs of a token's own alphabet. A matcher that
# backtracks never finishes them (the test's timeout says so); these take one pass each.
_HOSTILE = {
    "sk-": "sk-" * 400_000,
    "sk-ant-": "sk-ant-" * 200_000,
    "eyJ-": "eyJ-" * 300_000,
    "eyJ.": ("eyJ" + "a" * 20 + ".") * 50_000,
    "pem": "-----BEGIN PRIVATE KEY-----" * 40_000,
    "pem-spaces": "-----BEGIN " + " " * 1_000_000,
    "pem-body": "-----BEGIN PRIVATE KEY-----" + "A" * 1_000_000,
    "bearer": "Bearer " * 200_000,
    "bearer-spaces": "Bearer" + " " * 1_000_000 + "x",
    "basic": "Basic " + "A" * 1_000_000,
    "basic-many": "Basic dXNlcjpwYXNz " * 60_000,
    "scheme": "a://" * 300_000,
    "userinfo": "http://" + "a" * 1_000_000 + ":",
    "userinfo-many": "a://b:" * 200_000,
    "aws-names": "aws_secret_access_key" * 50_000,
    "aws-keys": "AKIAIOSFODNN7EXAMPLE" * 50_000,
    "aws-pairs": ("AKIAIOSFODNN7EXAMPLE" + " " * 24) * 30_000,
    "base64": "A" * 1_000_000,
    "ghp": "ghp_" * 300_000,
    "hf": "hf_" * 300_000,
    "xoxb": "xoxb-" * 200_000,
    "words": "word " * 200_000,
}


@pytest.mark.parametrize("text", _HOSTILE.values(), ids=_HOSTILE.keys())
def test_hostile_text_is_read_in_one_pass(text: str) -> None:
    shapes = Shapes()
    found = shapes.kinds(text)
    assert shapes.scrub(text, "<r>") == text if not found else len(shapes.scrub(text, "<r>")) < len(text)


def test_a_users_pattern_is_a_shape_and_a_bad_one_a_clear_error(tmp_path: Path) -> None:
    assert Shapes([r"ACME-[0-9]{6}"]).kinds("ticket ACME-424242") == ["a match of --secret-pattern 'ACME-[0-9]{6}'"]
    with pytest.raises(ConfigError, match=r"^--secret-pattern '\(' is no regular expression: "):
        Shapes(["("])
    record = ["record", "--upstream", "http://127.0.0.1:9", "-c", str(tmp_path / "c.toml")]
    for command in (record, ["check", "--secrets", "."]):
        refused = subprocess.run(
            [sys.executable, "-m", "sse_tape", *command, "--secret-pattern", "("],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.startswith("Error: --secret-pattern '(' is no regular expression: "), refused.stderr
        assert "Traceback" not in refused.stderr
